import { execFileSync } from 'node:child_process';
import { Worker } from '@temporalio/worker';
import { mkdtemp } from 'node:fs/promises';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { applyBudgets } from '../src/budgets/budgets-store';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { monthlyReport } from '../src/workflows/monthly-report';
import {
  CALL_THEN_BOOK_PATCH,
  CLAIM_WITH_RESERVE_PATCH,
  CURRENT_RUN_SHAPE,
  LOCAL_BOOKKEEPING_PATCH,
  scheduledRun,
} from '../src/workflows/scheduled-run';
import { createTestContext, type TestContext } from './support/context';
import { waitFor } from './support/wait';
import { bookExactSpend } from './support/budget-spend';
import { startWorkers, workflowBundle } from './support/workers';

/**
 * Determinism: the workflow code must make the same decisions when it replays a history. Histories recorded now
 * replay against today's code, and so do the histories committed under test/fixtures/histories, recorded by earlier
 * versions: a change that breaks running workflows fails here.
 *
 * Committed fixtures:
 * - scheduled-run-{completed,duplicate,failed}.json: recorded before the `call-then-book` patch (claimRun, chat,
 *   embedMemory, completeRun). They replay on the legacy branch that `patched()` keeps for them.
 * - scheduled-run-call-then-book-{completed,duplicate,failed}.json, scheduled-run-schedule-started.json (started by a
 *   Schedule, with TemporalScheduledStartTime), scheduled-run-billed-retry.json (a billed failure booked and called
 *   again) and monthly-report.json: recorded after it.
 * - scheduled-run-budget-{blocked,downgraded}.json: recorded after the `budget-guard` patch (a run blocked before any
 *   call, and one downgraded to the cheap model), on normal activities.
 * - scheduled-run-local-bookkeeping-*.json: recorded after the `local-bookkeeping` patch (bookkeeping as local
 *   activities): completed, duplicate, failed, a billed retry, started by a Schedule, and blocked before a call made
 *   again, on claimRun then reserveBudget.
 * - scheduled-run-claim-with-reserve-*.json: recorded after the `claim-with-reserve` patch (the claim and the first
 *   reservation as one local activity, claimAndReserve): the same runs, plus blocked before any call and downgraded.
 *   Today an input without a shape (a schedule applied before CURRENT_RUN_SHAPE) still records on this path.
 *   Re-record them with RECORD_CLAIM_WITH_RESERVE_HISTORIES=1.
 * - scheduled-run-unmarked-*.json: the same runs with an input that names the current shape (CURRENT_RUN_SHAPE), as
 *   every schedule applied since, manual run and retry has: the claim-with-reserve path with no patch markers.
 *   Re-record them with RECORD_UNMARKED_HISTORIES=1.
 * The fixtures of the earlier patches are history: today's code records on the newer paths, so nothing re-records
 * them (that would overwrite them with a newer path). RECORD_HISTORIES=1 writes the monthly report's.
 */
const FIXTURES = join(import.meta.dirname, 'fixtures', 'histories');
const LEGACY_FIXTURES = ['scheduled-run-completed.json', 'scheduled-run-duplicate.json', 'scheduled-run-failed.json'];
let ctx: TestContext;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.pool, loadPricesFile('prices/standard.json'), 'test');
});

afterAll(async () => ctx?.close());

/**
 * The two inputs a run meets today: one with the current shape (every schedule applied since CURRENT_RUN_SHAPE, and
 * manual runs and retries), which records no patch markers, and one without (a schedule applied before it), which
 * takes the claim-with-reserve path through `patched()`. Each records its own fixtures, under its own task IDs.
 */
const VARIANTS = [
  {
    label: 'input with the current shape',
    prefix: 'scheduled-run-unmarked',
    flag: 'RECORD_UNMARKED_HISTORIES',
    id: 'replayed',
    shape: CURRENT_RUN_SHAPE,
  },
  {
    label: 'input without a shape',
    prefix: 'scheduled-run-claim-with-reserve',
    flag: 'RECORD_CLAIM_WITH_RESERVE_HISTORIES',
    id: 'replayedold',
    shape: undefined,
  },
];
type Variant = (typeof VARIANTS)[number];

const task = (v: Variant, model = 'openai/gpt-4o-mini') => ({
  taskId: v.id,
  userId: 'u1',
  input: 'Summarise the day.',
  model,
  embeddingModel: 'openai/text-embedding-3-small',
  ...(v.shape ? { shape: v.shape } : {}),
});

type Recorded = { name: string; workflowId: string; runId: string };
const recordOf = (name: string, run: { workflowId: string; firstExecutionRunId: string }): Recorded => ({
  name,
  workflowId: run.workflowId,
  runId: run.firstExecutionRunId,
});

/** Replays every recorded history against today's bundle; with recordFlag=1 in the environment also writes it as a fixture. */
async function replayAndMaybeRecord(recorded: Recorded[], recordFlag?: string, opts: { unmarked?: boolean } = {}): Promise<void> {
  for (const r of recorded) {
    const history = await ctx.client.workflow.getHandle(r.workflowId, r.runId).fetchHistory();
    // a run whose input names the current shape asks no `patched()`: no marker in its history, so no TemporalChangeVersion
    if (opts.unmarked)
      expect([r.name, history.events?.filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_patch').length]).toEqual([
        r.name,
        0,
      ]);
    await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, history, `${r.name}-${r.runId}`);
    if (recordFlag && process.env[recordFlag] === '1') {
      // Recorded with the temporal CLI, whose JSON is the format Worker.runReplayHistory reads back.
      const json = execFileSync(inject('stack').temporalCli, [
        'workflow',
        'show',
        '--workflow-id',
        r.workflowId,
        '--run-id',
        r.runId,
        '--output',
        'json',
        '--address',
        ctx.temporalAddress,
        '--namespace',
        ctx.namespace,
      ]);
      writeFileSync(join(FIXTURES, `${r.name}.json`), json);
    }
  }
}

describe('freshly recorded histories replay without nondeterminism', () => {
  describe.each(VARIANTS)('$label', (v) => {
    it('scheduledRun: completed, duplicate, failed, started by a Schedule, and with a billed failure called again', async () => {
      const fleet = await startWorkers(ctx, 1);
      const recorded = await fleet.runWhile(async (): Promise<Recorded[]> => {
        const out: Recorded[] = [];
        const completed = await ctx.client.workflow.start(scheduledRun, {
          workflowId: `cron-${v.id}-2026-11-02T09:00:00Z`,
          taskQueue: ctx.taskQueue,
          args: [task(v)],
        });
        await completed.result();
        out.push(recordOf(`${v.prefix}-completed`, completed));
        // same slot again (a native backfill would do this): ends as duplicate
        const duplicate = await ctx.client.workflow.start(scheduledRun, {
          workflowId: `cron-${v.id}-2026-11-02T09:00:00Z`,
          taskQueue: ctx.taskQueue,
          args: [task(v)],
          workflowIdReusePolicy: 'ALLOW_DUPLICATE',
        });
        expect(await duplicate.result()).toMatchObject({ status: 'duplicate' });
        out.push(recordOf(`${v.prefix}-duplicate`, duplicate));
        // a model with no price fails before any call
        const failed = await ctx.client.workflow.start(scheduledRun, {
          workflowId: `cron-${v.id}-2026-11-02T09:05:00Z`,
          taskQueue: ctx.taskQueue,
          args: [task(v, 'acme/unpriced')],
        });
        await expect(failed.result()).rejects.toThrow();
        out.push(recordOf(`${v.prefix}-failed`, failed));
        // a billed failure: booked as failed, called again as attempt 2
        const billed = await ctx.client.workflow.start(scheduledRun, {
          workflowId: `cron-${v.id}-2026-11-02T09:10:00Z`,
          taskQueue: ctx.taskQueue,
          args: [{ ...task(v), simulate: { failFirstAttempts: 1 } }],
        });
        await billed.result();
        out.push(recordOf(`${v.prefix}-billed-retry`, billed));

        // started by a Schedule (a backfill of one slot), so TemporalScheduledStartTime is stamped
        const schedule = await ctx.client.schedule.create({
          scheduleId: `cron-${v.id}-sched`,
          spec: { cronExpressions: ['* * * * *'] },
          action: {
            type: 'startWorkflow',
            workflowType: scheduledRun,
            workflowId: `cron-${v.id}-sched`,
            taskQueue: ctx.taskQueue,
            args: [{ ...task(v), taskId: `${v.id}-sched` }],
          },
          state: { paused: true },
        });
        await schedule.backfill({ start: new Date('2026-11-02T09:00:00Z'), end: new Date('2026-11-02T09:00:30Z'), overlap: 'ALLOW_ALL' });
        const slotId = `cron-${v.id}-sched-2026-11-02T09:00:00Z`;
        await waitFor(
          async () =>
            (await ctx.client.workflow
              .getHandle(slotId)
              .describe()
              .then(
                (d) => d.status.name,
                () => 'absent',
              )) === 'COMPLETED',
          60_000,
          `${slotId} completed`,
        );
        const started = await ctx.client.workflow.getHandle(slotId).describe();
        expect(started.raw.workflowExecutionInfo?.searchAttributes?.indexedFields?.TemporalScheduledStartTime).toBeDefined();
        await schedule.delete();
        out.push({ name: `${v.prefix}-schedule-started`, workflowId: slotId, runId: started.runId });
        return out;
      });
      await replayAndMaybeRecord(recorded, v.flag, { unmarked: v.shape !== undefined });
    }, 180_000);

    it('scheduledRun under the budget guard: blocked before any call, and downgraded to the cheap model', async () => {
      await applyBudgets(
        ctx.pool,
        {
          budgets: [
            { userId: `u-blocked-${v.id}`, monthlyLimitUsd: '0', timeZone: 'UTC' },
            { userId: `u-cheap-${v.id}`, monthlyLimitUsd: '1', timeZone: 'UTC' },
            // exactly one run's worst case (see `again` below): after a billed chat call, calling again does not fit
            { userId: `u-again-${v.id}`, monthlyLimitUsd: '0.00077', timeZone: 'UTC' },
          ],
          downgrade: { 'openai/gpt-4o-mini': 'openai/gpt-4.1-nano' },
        },
        'replay',
      );
      await bookExactSpend(ctx.pool, `replay-cheap-spend-${v.id}`, `u-cheap-${v.id}`, '0.9');
      const fleet = await startWorkers(ctx, 1);
      const recorded = await fleet.runWhile(async (): Promise<Recorded[]> => {
        const blocked = await ctx.client.workflow.start(scheduledRun, {
          workflowId: `cron-${v.id}-budget-2026-11-02T10:00:00Z`,
          taskQueue: ctx.taskQueue,
          args: [{ ...task(v), taskId: `${v.id}-budget`, userId: `u-blocked-${v.id}` }],
        });
        expect(await blocked.result()).toMatchObject({ status: 'blocked' });
        const cheap = await ctx.client.workflow.start(scheduledRun, {
          workflowId: `cron-${v.id}-budget-2026-11-02T10:05:00Z`,
          taskQueue: ctx.taskQueue,
          args: [{ ...task(v), taskId: `${v.id}-budget`, userId: `u-cheap-${v.id}` }],
        });
        expect(await cheap.result()).toMatchObject({ status: 'completed', tier: 'cheap' });
        // worst case 1000 prompt + 1000 reply tokens of gpt-4o-mini ($0.00075) + 1000 embedding tokens ($0.00002)
        const again = await ctx.client.workflow.start(scheduledRun, {
          workflowId: `cron-${v.id}-budget-2026-11-02T10:10:00Z`,
          taskQueue: ctx.taskQueue,
          args: [
            {
              ...task(v),
              taskId: `${v.id}-budget`,
              userId: `u-again-${v.id}`,
              maxOutputTokens: 1000,
              simulate: { promptTokens: 1000, completionTokens: 1000, embeddingTokens: 1000, failFirstAttempts: 1 },
            },
          ],
        });
        expect(await again.result()).toMatchObject({ status: 'blocked', budget: { blockedBefore: 'chat call 2' } });
        return [
          recordOf(`${v.prefix}-blocked`, blocked),
          recordOf(`${v.prefix}-downgraded`, cheap),
          recordOf(`${v.prefix}-blocked-again`, again),
        ];
      });
      await replayAndMaybeRecord(recorded, v.flag, { unmarked: v.shape !== undefined });
    });
  });

  it('monthlyReport started without a month (resolved from its ID), generated and delivered (delivery off)', async () => {
    const fleet = await startWorkers(ctx, 1, {
      reportsDir: await mkdtemp(join(tmpdir(), 'cronledger-replay-reports-')),
      reportWebhookUrl: '',
    });
    const recorded = await fleet.runWhile(async (): Promise<Recorded[]> => {
      const report = await ctx.client.workflow.start(monthlyReport, {
        workflowId: 'report-monthly-2026-11-01T00:00:00Z',
        taskQueue: ctx.taskQueue,
        args: [{}],
      });
      expect((await report.result()).month).toBe('2026-10');
      return [{ name: 'monthly-report', workflowId: report.workflowId, runId: report.firstExecutionRunId }];
    });
    await replayAndMaybeRecord(recorded, 'RECORD_HISTORIES');
  }, 120_000);
});

describe('committed histories', () => {
  const files = readdirSync(FIXTURES).filter((f) => f.endsWith('.json'));
  const markersIn = (file: string): string[] =>
    (
      JSON.parse(readFileSync(join(FIXTURES, file), 'utf8')).events as {
        markerRecordedEventAttributes?: { details?: { 'patch-data'?: { payloads?: { data: string }[] } } };
      }[]
    )
      .flatMap((e) => e.markerRecordedEventAttributes?.details?.['patch-data']?.payloads ?? [])
      .map((p) => Buffer.from(p.data, 'base64').toString('utf8'));

  it('cover the legacy sequence, the patched ones, a schedule start, a billed retry and the monthly report', () => {
    for (const f of [
      ...LEGACY_FIXTURES,
      'scheduled-run-call-then-book-completed.json',
      'scheduled-run-schedule-started.json',
      'scheduled-run-billed-retry.json',
      'scheduled-run-budget-blocked.json',
      'scheduled-run-local-bookkeeping-completed.json',
      'scheduled-run-local-bookkeeping-blocked-again.json',
      'scheduled-run-claim-with-reserve-completed.json',
      'scheduled-run-claim-with-reserve-duplicate.json',
      'scheduled-run-claim-with-reserve-blocked.json',
      'scheduled-run-claim-with-reserve-blocked-again.json',
      'scheduled-run-unmarked-completed.json',
      'scheduled-run-unmarked-duplicate.json',
      'scheduled-run-unmarked-failed.json',
      'scheduled-run-unmarked-billed-retry.json',
      'scheduled-run-unmarked-schedule-started.json',
      'scheduled-run-unmarked-blocked.json',
      'scheduled-run-unmarked-downgraded.json',
      'scheduled-run-unmarked-blocked-again.json',
      'monthly-report.json',
    ]) {
      expect(files).toContain(f);
    }
    // the local-bookkeeping ones carry its marker; those recorded before it don't (they replay on normal activities);
    // only the claim-with-reserve ones carry that marker too (the others replay on claimRun then reserveBudget)
    const folded = (f: string) => f.startsWith('scheduled-run-claim-with-reserve-');
    const unmarked = (f: string) => f.startsWith('scheduled-run-unmarked-');
    // the unmarked ones (an input with the current shape) carry no patch marker at all, and their input names the shape
    for (const f of files.filter(unmarked)) {
      expect(markersIn(f)).toEqual([]);
      const started = JSON.parse(readFileSync(join(FIXTURES, f), 'utf8')).events[0].workflowExecutionStartedEventAttributes;
      const input = JSON.parse(Buffer.from(started.input.payloads[0].data, 'base64').toString('utf8')) as { shape?: string };
      expect(input.shape).toBe(CURRENT_RUN_SHAPE);
    }
    for (const f of files.filter((f) => f.startsWith('scheduled-run-') && !unmarked(f))) {
      expect(markersIn(f).join().includes(LOCAL_BOOKKEEPING_PATCH)).toBe(f.startsWith('scheduled-run-local-bookkeeping-') || folded(f));
      expect(markersIn(f).join().includes(CLAIM_WITH_RESERVE_PATCH)).toBe(folded(f));
    }
    // the legacy ones carry no patch marker (they take the old branch); the new scheduledRun ones carry it
    for (const f of LEGACY_FIXTURES) expect(markersIn(f).join()).not.toContain(CALL_THEN_BOOK_PATCH);
    for (const f of files.filter((f) => f.startsWith('scheduled-run-') && !LEGACY_FIXTURES.includes(f) && !unmarked(f))) {
      expect(markersIn(f).join()).toContain(CALL_THEN_BOOK_PATCH);
    }
  });

  it.each(files)("%s replays against today's code", async (file) => {
    const history = JSON.parse(readFileSync(join(FIXTURES, file), 'utf8'));
    await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, history, file);
  });
});
