import { describe, expect, it } from 'vitest';
import { localDay, projectUser, simulateBackfill, taskForecast, type Band, type RunCost } from '../../src/forecast/projection';

const BANDS: Band[] = [
  { tier: 'cheap', fromPercent: 80 },
  { tier: 'blocked', fromPercent: 100 },
];
const cost = (medianUsd: string, p95Usd: string): RunCost => ({ basis: 'runs', runs: 30, medianUsd, p95Usd });
/** Every hour from `from` (UTC ISO) for `n` hours. */
const hourly = (from: string, n: number): Date[] => Array.from({ length: n }, (_, i) => new Date(Date.parse(from) + i * 3_600_000));

describe('the month-end forecast', () => {
  it('multiplies the slots by the cost per run exactly, far past a float', () => {
    expect(taskForecast(3, cost('0.000000000000000001', '0.100000000000000003'))).toEqual({
      medianUsd: '0.000000000000000003',
      highUsd: '0.300000000000000009',
    });
    expect(taskForecast(0, cost('1.5', '2'))).toEqual({ medianUsd: '0.000000000000000000', highUsd: '0.000000000000000000' });
  });

  it('adds spent, reserved and every task, and finds the day each band is reached, median and high apart', () => {
    const p = projectUser({
      at: new Date('2026-11-20T10:30:00Z'),
      timeZone: 'UTC',
      limitUsd: '10',
      spentUsd: '5',
      reservedUsd: '1',
      bands: BANDS,
      // one run a day at 12:00 UTC from the 20th: $0.50 median, $1.00 high
      tasks: [{ slots: Array.from({ length: 11 }, (_, i) => new Date(Date.UTC(2026, 10, 20 + i, 12))), cost: cost('0.5', '1') }],
    });
    // every slot: 6 + 11 × 0.5 and 6 + 11 × 1; what can be spent stops at the limit (median 8 slots, high 4 run)
    expect(p).toMatchObject({
      allSlotsMedianUsd: '11.500000000000000000',
      allSlotsHighUsd: '17.000000000000000000',
      medianUsd: '10.000000000000000000',
      highUsd: '10.000000000000000000',
    });
    expect(p.tasks).toEqual([
      {
        median: { run: 8, blocked: 3, skipped: 0 },
        high: { run: 4, blocked: 7, skipped: 0 },
        medianUsd: '4.000000000000000000',
        highUsd: '4.000000000000000000',
      },
    ]);
    // median: 6 + 0.5 k reaches 8 at k = 4 (the 23rd), 10 at k = 8 (the 27th); high: 6 + k reaches 8 at k = 2, 10 at k = 4
    expect(p.crossings).toEqual([
      { tier: 'cheap', percent: 80, medianDay: '2026-11-23', highDay: '2026-11-21' },
      { tier: 'blocked', percent: 100, medianDay: '2026-11-27', highDay: '2026-11-23' },
    ]);
  });

  it('says the day of `at` for a band already reached, and no day for one never reached or without a limit', () => {
    const base = { at: new Date('2026-11-20T23:30:00Z'), timeZone: 'Europe/Berlin', spentUsd: '8', reservedUsd: '0', bands: BANDS };
    const p = projectUser({ ...base, limitUsd: '10', tasks: [{ slots: hourly('2026-11-23T00:00:00Z', 3), cost: cost('0.1', '0.1') }] });
    // exactly 80 % at `at`, 23:30 UTC, already the 21st in Berlin (the first slot is on the 23rd)
    expect(p.crossings).toEqual([
      { tier: 'cheap', percent: 80, medianDay: '2026-11-21', highDay: '2026-11-21' },
      { tier: 'blocked', percent: 100, medianDay: null, highDay: null },
    ]);
    expect(projectUser({ ...base, limitUsd: null, tasks: [] }).crossings).toEqual([]);
  });

  it('walks the slots of all tasks in time order, not task after task', () => {
    const p = projectUser({
      at: new Date('2026-11-01T00:00:00Z'),
      timeZone: 'UTC',
      limitUsd: '1',
      spentUsd: '0',
      reservedUsd: '0',
      bands: BANDS,
      tasks: [
        { slots: [new Date('2026-11-29T00:00:00Z')], cost: cost('0.6', '0.6') },
        { slots: [new Date('2026-11-02T00:00:00Z')], cost: cost('0.5', '0.5') },
      ],
    });
    expect(p.crossings.map((c) => c.medianDay)).toEqual(['2026-11-29', '2026-11-29']);
  });

  it('spends nothing past the limit: a block task goes on being blocked while a cheaper one still fits, a pause task skips the rest', () => {
    const daily = (hour: number) => Array.from({ length: 10 }, (_, i) => new Date(Date.UTC(2026, 10, 1 + i, hour)));
    const walk = (policy: 'block' | 'pause') =>
      projectUser({
        at: new Date('2026-11-01T00:00:00Z'),
        timeZone: 'UTC',
        limitUsd: '1',
        spentUsd: '0',
        reservedUsd: '0',
        bands: BANDS,
        tasks: [
          { slots: daily(6), cost: cost('0.05', '0.05'), policy },
          { slots: daily(18), cost: cost('0.15', '0.15') },
        ],
      });
    // 0.2 a day: after 4 days 0.8; day 5: 0.85, then 1.0 does fit (1.0 exactly); day 6 on: used >= limit, all blocked
    const block = walk('block');
    expect(block.tasks.map((t) => t.median)).toEqual([
      { run: 5, blocked: 5, skipped: 0 },
      { run: 5, blocked: 5, skipped: 0 },
    ]);
    expect(block.medianUsd).toBe('1.000000000000000000');
    // pause: the 6 am task's first blocked run (day 6) pauses it; its 4 later slots are skipped
    expect(walk('pause').tasks.map((t) => t.median)).toEqual([
      { run: 5, blocked: 1, skipped: 4 },
      { run: 5, blocked: 5, skipped: 0 },
    ]);
    // a cheaper slot still fits after a dearer one was blocked: 0.9 spent, 0.15 does not fit, 0.05 does
    const mixed = projectUser({
      at: new Date('2026-11-01T00:00:00Z'),
      timeZone: 'UTC',
      limitUsd: '1',
      spentUsd: '0.9',
      reservedUsd: '0',
      bands: BANDS,
      tasks: [
        { slots: [new Date('2026-11-02T00:00:00Z')], cost: cost('0.15', '0.15') },
        { slots: [new Date('2026-11-03T00:00:00Z')], cost: cost('0.05', '0.05') },
      ],
    });
    expect(mixed.tasks.map((t) => t.median)).toEqual([
      { run: 0, blocked: 1, skipped: 0 },
      { run: 1, blocked: 0, skipped: 0 },
    ]);
    expect(mixed.medianUsd).toBe('0.950000000000000000');
  });

  it('blocks every slot of a task its maxCostPerRun blocks, spending nothing and pausing nothing', () => {
    const p = projectUser({
      at: new Date('2026-11-01T00:00:00Z'),
      timeZone: 'UTC',
      limitUsd: null,
      spentUsd: '0',
      reservedUsd: '0',
      bands: BANDS,
      tasks: [
        {
          slots: hourly('2026-11-02T00:00:00Z', 3),
          cost: {
            ...cost('0', '0'),
            capped: { maxCostPerRunUsd: '0.001', choice: 'blocked', uncappedMedianUsd: '0.5', uncappedP95Usd: '1' },
          },
          policy: 'pause',
        },
      ],
    });
    expect(p.tasks[0].median).toEqual({ run: 0, blocked: 3, skipped: 0 });
    expect(p.medianUsd).toBe('0.000000000000000000');
  });

  it("counts the budget zone's day, across its DST change (the 25-hour day in Berlin)", () => {
    // 2026-10-25 has 25 hours in Berlin: 22:00 UTC on the 24th is its first hour, 22:59 UTC on the 25th its last
    expect(localDay(new Date('2026-10-24T22:00:00Z'), 'Europe/Berlin')).toBe('2026-10-25');
    expect(localDay(new Date('2026-10-25T22:59:00Z'), 'Europe/Berlin')).toBe('2026-10-25');
    expect(localDay(new Date('2026-10-25T23:00:00Z'), 'Europe/Berlin')).toBe('2026-10-26');
    const slots = hourly('2026-10-24T22:00:00Z', 26);
    const p = projectUser({
      at: new Date('2026-10-24T21:00:00Z'),
      timeZone: 'Europe/Berlin',
      limitUsd: '25',
      spentUsd: '0',
      reservedUsd: '0',
      bands: BANDS,
      tasks: [{ slots, cost: cost('1', '1') }],
    });
    // the 25th slot (22:00 UTC) is still the 25th in Berlin; the 26th is the next day
    expect(p.crossings[1].medianDay).toBe('2026-10-25');
  });
});

describe('the backfill simulation', () => {
  const base = { spentUsd: '0', reservedUsd: '0', limitUsd: '1', bands: BANDS };
  it('runs at the default model below 80 %, downgrades from 80 % while a run fits, blocks the rest', () => {
    // $0.14 a run: from 0, .14, .28, .42, .56, .70 each runs (6); from .84 (past 80 %) it fits: downgraded (1); from .98
    // a run does not fit: blocked (3)
    expect(simulateBackfill({ ...base, runCostsUsd: Array(10).fill('0.14') })).toEqual({
      run: 6,
      downgraded: 1,
      blocked: 3,
      totalUsd: '1.400000000000000000',
      fits: false,
    });
  });

  it('fits exactly at the limit, and everything runs without a limit', () => {
    expect(simulateBackfill({ ...base, runCostsUsd: Array(4).fill('0.25') })).toMatchObject({
      run: 4,
      downgraded: 0,
      blocked: 0,
      fits: true,
    });
    expect(simulateBackfill({ ...base, runCostsUsd: Array(5).fill('0.25'), spentUsd: '0.5', reservedUsd: '0.5' })).toMatchObject({
      run: 0,
      downgraded: 0,
      blocked: 5,
      fits: false,
    });
    expect(simulateBackfill({ ...base, limitUsd: null, runCostsUsd: Array(5).fill('9') })).toMatchObject({
      run: 5,
      blocked: 0,
      fits: true,
    });
  });
});
