import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NOMINAL_PROBE_PREFIX, slotTimes } from '../src/schedules/slot-times';
import { timestampFromDate, dateFromTimestamp } from '../src/temporal-reads';
import { applyTasks } from '../src/schedules/apply-tasks';
import { parseTasksFile } from '../src/tasks/tasks-file';
import { createTestContext, type TestContext } from './support/context';
import { waitFor } from './support/wait';

/**
 * Slot times come from the Temporal server's schedule engine (ListScheduleMatchingTimes), the same code that fires
 * the schedules. These tests pin down what it does with the cron features and the DST cases docs/scheduling.md documents.
 */
let ctx: TestContext;

const tasks: Record<string, [cron: string, timezone?: string]> = {
  list: ['0,30 9 * * *'],
  range: ['0 9-11 * * *'],
  step: ['*/20 * * * *'],
  'range-step': ['10-50/20 8 * * *'],
  'sunday-0': ['0 12 * * 0'],
  'sunday-7': ['0 12 * * 7'],
  weekdays: ['0 8 * * 1-5'],
  'day-31': ['0 12 31 * *'],
  'day-29': ['0 12 29 2 *'],
  'dom-and-dow': ['0 0 1,15 * 0'],
  'berlin-0230': ['30 2 * * *', 'Europe/Berlin'],
  'new-york-0130': ['30 1 * * *', 'America/New_York'],
  'every-minute': ['* * * * *'],
};

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  const file = parseTasksFile({
    tasks: [
      ...Object.entries(tasks).map(([id, [cron, timezone]]) => ({ id, cron, timezone, userId: 'u', input: 'x', paused: true })),
      { id: 'hourly-jittered', cron: '0 * * * *', jitter: '30m', userId: 'u', input: 'x', paused: true },
    ],
    monthlyReport: false,
    budgetSweep: false,
  });
  await applyTasks(ctx.client, file, ctx.taskQueue, ctx.operatorPool);
});

afterAll(async () => ctx?.close());

const slots = async (id: string, from: string, to: string): Promise<string[]> =>
  (await slotTimes(ctx.client, `cron-${id}`, new Date(from), new Date(to))).map((d) => d.toISOString().replace('.000', ''));

describe('cron features, as the Temporal server fires them', () => {
  it('lists, ranges and steps', async () => {
    expect(await slots('list', '2026-11-02T00:00:00Z', '2026-11-02T23:59:00Z')).toEqual(['2026-11-02T09:00:00Z', '2026-11-02T09:30:00Z']);
    expect(await slots('range', '2026-11-02T00:00:00Z', '2026-11-02T23:59:00Z')).toEqual([
      '2026-11-02T09:00:00Z',
      '2026-11-02T10:00:00Z',
      '2026-11-02T11:00:00Z',
    ]);
    expect(await slots('step', '2026-11-02T09:00:00Z', '2026-11-02T10:00:00Z')).toEqual([
      '2026-11-02T09:00:00Z',
      '2026-11-02T09:20:00Z',
      '2026-11-02T09:40:00Z',
      '2026-11-02T10:00:00Z',
    ]);
    expect(await slots('range-step', '2026-11-02T00:00:00Z', '2026-11-02T23:59:00Z')).toEqual([
      '2026-11-02T08:10:00Z',
      '2026-11-02T08:30:00Z',
      '2026-11-02T08:50:00Z',
    ]);
  });

  it('day-of-week 0 and 7 are both Sunday; 1-5 are the weekdays', async () => {
    const week = ['2026-11-01T00:00:00Z', '2026-11-07T23:59:00Z'] as const; // Sunday 1st .. Saturday 7th
    expect(await slots('sunday-0', ...week)).toEqual(['2026-11-01T12:00:00Z']);
    expect(await slots('sunday-7', ...week)).toEqual(['2026-11-01T12:00:00Z']);
    expect(await slots('weekdays', ...week)).toEqual(['02', '03', '04', '05', '06'].map((d) => `2026-11-${d}T08:00:00Z`));
  });

  it('month ends: day 31 only fires in 31-day months, 29 February only in leap years', async () => {
    const year = await slots('day-31', '2026-01-01T00:00:00Z', '2026-12-31T23:59:00Z');
    expect(year.map((t) => t.slice(5, 7))).toEqual(['01', '03', '05', '07', '08', '10', '12']);
    expect(await slots('day-29', '2027-01-01T00:00:00Z', '2027-12-31T23:59:00Z')).toEqual([]);
    expect(await slots('day-29', '2028-01-01T00:00:00Z', '2028-12-31T23:59:00Z')).toEqual(['2028-02-29T12:00:00Z']);
  });

  it('day-of-month and day-of-week together must BOTH match (unlike Vixie cron, which fires on either)', async () => {
    // November 2026: the 1st and the 15th are Sundays; December 2026 has no Sunday on the 1st or 15th.
    expect(await slots('dom-and-dow', '2026-11-01T00:00:00Z', '2026-11-30T23:59:00Z')).toEqual([
      '2026-11-01T00:00:00Z',
      '2026-11-15T00:00:00Z',
    ]);
    expect(await slots('dom-and-dow', '2026-12-01T00:00:00Z', '2026-12-31T23:59:00Z')).toEqual([]);
  });

  it('DST in Europe/Berlin: 02:30 is skipped the night it does not exist, and fires once in the repeated hour', async () => {
    // 29 March 2026 clocks jump 02:00 -> 03:00 CEST: no 02:30 that night.
    expect(await slots('berlin-0230', '2026-03-28T00:00:00Z', '2026-03-30T23:59:00Z')).toEqual([
      '2026-03-28T01:30:00Z', // 02:30 CET
      '2026-03-30T00:30:00Z', // 02:30 CEST
    ]);
    // 25 October 2026 clocks fall 03:00 CEST -> 02:00 CET: 02:30 happens twice, the schedule fires on the second.
    expect(await slots('berlin-0230', '2026-10-24T00:00:00Z', '2026-10-26T23:59:00Z')).toEqual([
      '2026-10-24T00:30:00Z', // 02:30 CEST
      '2026-10-25T01:30:00Z', // 02:30 CET, the second 02:30
      '2026-10-26T01:30:00Z', // 02:30 CET
    ]);
  });

  it('DST in America/New_York: 01:30 fires twice in the repeated hour, as two distinct UTC slots', async () => {
    // 1 November 2026 clocks fall 02:00 EDT -> 01:00 EST: 01:30 EDT (05:30Z) and 01:30 EST (06:30Z) both fire.
    expect(await slots('new-york-0130', '2026-10-31T00:00:00Z', '2026-11-02T23:59:00Z')).toEqual([
      '2026-10-31T05:30:00Z',
      '2026-11-01T05:30:00Z',
      '2026-11-01T06:30:00Z',
      '2026-11-02T06:30:00Z',
    ]);
  });
});

describe('slot times for backfill', () => {
  it("pages past the server's 1,000 times per call: an every-minute task over a day and a minute has 1,441 slots", async () => {
    const all = await slots('every-minute', '2026-11-02T00:00:00Z', '2026-11-03T00:00:00Z');
    expect(all).toHaveLength(1441);
    expect(all[0]).toBe('2026-11-02T00:00:00Z');
    expect(all[1000]).toBe('2026-11-02T16:40:00Z');
    expect(all[1440]).toBe('2026-11-03T00:00:00Z');
    expect(new Set(all).size).toBe(1441);
  });

  it('gives the nominal times of a jittered schedule (the times it names and claims runs by), not the jittered ones', async () => {
    const from = new Date('2026-11-02T00:00:00Z');
    const to = new Date('2026-11-02T23:59:00Z');
    // the server's own answer for this schedule is jittered, so the nominal times below are not simply its answer
    const raw = await ctx.client.workflowService.listScheduleMatchingTimes({
      namespace: ctx.namespace,
      scheduleId: 'cron-hourly-jittered',
      startTime: timestampFromDate(from),
      endTime: timestampFromDate(to),
    });
    const jittered = (raw.startTime ?? []).map(dateFromTimestamp);
    expect(jittered.length).toBeGreaterThan(20); // a slot near the end of the window may be jittered past it
    expect(jittered.filter((t) => t.getUTCMinutes() !== 0 || t.getUTCSeconds() !== 0).length).toBeGreaterThan(12);

    const nominal = await slots('hourly-jittered', from.toISOString(), to.toISOString());
    expect(nominal).toEqual(Array.from({ length: 24 }, (_, h) => `2026-11-02T${String(h).padStart(2, '0')}:00:00Z`));

    // the paused twin that listed them is gone (the schedule list is eventually consistent: wait for it to agree)
    await waitFor(
      async () => {
        for await (const s of ctx.client.schedule.list()) if (s.scheduleId.startsWith(NOMINAL_PROBE_PREFIX)) return false;
        return true;
      },
      30_000,
      'no nominal-times probe schedule left',
    );
  });
});
