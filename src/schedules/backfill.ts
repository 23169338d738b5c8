import {
  WorkflowExecutionAlreadyStartedError,
  WorkflowFailedError,
  type Client,
  type WorkflowHandleWithFirstExecutionRunId,
} from '@temporalio/client';
import type pg from 'pg';
import { taskScheduleId } from '../constants';
import { claimOf } from '../db/runs';
import { UserError } from '../errors';
import { backfillBudget, backfillBudgetLine, type BackfillBudget } from '../forecast/backfill-budget';
import { slotKey } from '../workflows/scheduled-time';
import type { scheduledRun } from '../workflows/scheduled-run';
import { claimState, isRetryable } from './claim-state';
import { retrySlot } from './retry-slot';
import { slotTimes } from './slot-times';
import { appliedTask, nominalId, startRun, type AppliedTask } from './start-run';

/** More slots than this in one backfill are refused before anything starts (two days of an every-minute task fit). */
export const MAX_BACKFILL_SLOTS = 5_000;
const START_CONCURRENCY = 16;

/**
 * - completed: this backfill ran the slot, and it completed.
 * - retried: the slot had failed (or was cancelled, or its execution was terminated or timed out: stale), and
 *   `--retry-failed` ran it again, and it completed.
 * - already-ran: the slot completed before (Temporal rejected its workflow ID, or its claim is completed).
 * - running: an execution of the slot is still running (the schedule's, or another backfill's).
 * - failed: the slot's run failed, now or before, and was not (successfully) retried. It can be run again.
 */
export type SlotOutcome = 'completed' | 'retried' | 'already-ran' | 'running' | 'failed';

export interface SlotResult {
  taskId: string;
  /** Nominal time of the slot, RFC3339 UTC seconds, exactly as the schedule would stamp it. */
  slot: string;
  workflowId: string;
  outcome: SlotOutcome;
  /** Which execution of the slot holds its claim, when known (1 = first; each retry adds one). */
  generation?: number;
  detail?: string;
}

export interface BackfillSummary {
  slots: number;
  completed: number;
  retried: number;
  alreadyRan: number;
  running: number;
  failed: number;
}

export interface BackfillOptions {
  taskIds: string[];
  from: Date;
  to: Date;
  /** Run again the slots whose claim failed, was cancelled or is stale (`backfill --retry-failed`). */
  retryFailed?: boolean;
  /** Start the slots even when the forecast says they do not fit a user's budget (the guard still decides each run). */
  allowOverBudget?: boolean;
  /** Start nothing: only say, per user, how many slots would run, be downgraded and be blocked. */
  dryRun?: boolean;
  onSlotDone?: (result: SlotResult, done: number, total: number) => void;
}

/**
 * Starts every slot of the range under the schedule's exact workflow ID with REJECT_DUPLICATE, so Temporal refuses
 * a slot whose run already exists, then waits for each run. A run that finds its slot claimed ends as duplicate.
 * A slot that already exists is judged by its claim in PostgreSQL: completed, running, or failed (and retried on request).
 */
export async function backfill(
  client: Client,
  pool: pg.Pool,
  opts: BackfillOptions,
): Promise<{ results: SlotResult[]; summary: BackfillSummary; budget?: BackfillBudget[] }> {
  const plan: { applied: AppliedTask; slot: Date }[] = [];
  for (const taskId of opts.taskIds) {
    const applied = await appliedTask(client, taskId);
    for (const slot of await slotTimes(client, taskScheduleId(taskId), opts.from, opts.to)) plan.push({ applied, slot });
  }
  if (plan.length > MAX_BACKFILL_SLOTS) {
    throw new UserError(`the range holds ${plan.length} slots, more than ${MAX_BACKFILL_SLOTS}; backfill a shorter range or fewer tasks`);
  }
  const planned = plan.map((p) => ({
    taskId: p.applied.task.id,
    userId: p.applied.task.userId,
    fingerprint: p.applied.fingerprint,
    slot: p.slot,
  }));
  const budget = opts.dryRun || !opts.allowOverBudget ? await backfillBudget(pool, planned) : undefined;
  if (opts.dryRun) return { results: [], summary: summarise([]), budget };
  const over = budget?.filter((b) => !b.fits) ?? [];
  if (over.length > 0) {
    throw new UserError(
      `the backfill does not fit the monthly budget of ${over.map((b) => b.userId).join(', ')} at the forecast's cost per run:\n` +
        over.map((b) => `  ${backfillBudgetLine(b)}\n`).join('') +
        'See the counts with --dry-run, or start the slots anyway with --allow-over-budget (the budget guard still decides each run).',
    );
  }

  const results: SlotResult[] = new Array(plan.length);
  let next = 0;
  let done = 0;
  const startNext = async () => {
    while (next < plan.length) {
      const i = next++;
      results[i] = await runSlot(client, pool, plan[i].applied, plan[i].slot, opts.retryFailed === true);
      opts.onSlotDone?.(results[i], ++done, plan.length);
    }
  };
  await Promise.all(Array.from({ length: Math.min(START_CONCURRENCY, plan.length) }, startNext));
  return { results, summary: summarise(results), ...(budget ? { budget } : {}) };
}

async function runSlot(client: Client, pool: pg.Pool, applied: AppliedTask, slot: Date, retryFailed: boolean): Promise<SlotResult> {
  const workflowId = `${taskScheduleId(applied.task.id)}-${nominalId(slot)}`;
  const base = { taskId: applied.task.id, slot: nominalId(slot), workflowId };
  let handle;
  try {
    handle = await startRun(client, applied, { workflowId, reusePolicy: 'REJECT_DUPLICATE' });
  } catch (err) {
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    return { ...base, ...(await existingSlot(client, pool, applied, slot, workflowId, retryFailed)) };
  }
  const ran = await outcomeOf(handle);
  // A duplicate stopped at the claim: another execution (another workflow ID) holds the slot. Its claim says how it went.
  if (ran.outcome === 'duplicate') return { ...base, ...(await existingSlot(client, pool, applied, slot, workflowId, false)) };
  return { ...base, ...ran, outcome: ran.outcome };
}

type Judged = Pick<SlotResult, 'outcome' | 'generation' | 'detail'>;

/** A slot that has an execution already: judged by its claim, and retried if asked and allowed. */
async function existingSlot(
  client: Client,
  pool: pg.Pool,
  applied: AppliedTask,
  slot: Date,
  workflowId: string,
  retryFailed: boolean,
): Promise<Judged> {
  const claim = await claimOf(pool, slotKey(applied.task.id, slot));
  if (!claim) {
    // The execution under this ID has not claimed the slot: it just started, or it closed before claiming.
    const { status } = await client.workflow.getHandle(workflowId).describe();
    if (status.name === 'RUNNING') return { outcome: 'running' };
    if (status.name === 'COMPLETED') return { outcome: 'already-ran' };
    if (!retryFailed) return { outcome: 'failed', detail: `its execution ended ${status.name.toLowerCase()} before claiming the slot` };
    const ran = await outcomeOf(await startRun(client, applied, { workflowId, reusePolicy: 'ALLOW_DUPLICATE_FAILED_ONLY' }));
    return ran.outcome === 'completed'
      ? { ...ran, outcome: 'retried' }
      : { ...ran, outcome: ran.outcome === 'duplicate' ? 'running' : ran.outcome };
  }
  const state = await claimState(client, claim);
  const generation = claim.generation;
  if (state === 'completed') return { outcome: 'already-ran', generation };
  if (state === 'running') return { outcome: 'running', generation };
  const before = `generation ${generation} ${state}${claim.error ? `: ${claim.error}` : ''}`;
  if (!retryFailed || !isRetryable(state)) return { outcome: 'failed', generation, detail: before };
  try {
    const retried = await retrySlot(client, claim, state);
    if (retried.outcome === 'completed') return { outcome: 'retried', generation: retried.generation };
    if (retried.outcome === 'failed')
      return { outcome: 'failed', generation: retried.generation, detail: `retried, failed again: ${retried.detail}` };
    return { outcome: 'running', detail: 'another retry took the slot over first' };
  } catch (err) {
    if (err instanceof UserError) return { outcome: 'failed', generation, detail: `${before}; not retried: ${err.message}` };
    throw err;
  }
}

async function outcomeOf(
  handle: WorkflowHandleWithFirstExecutionRunId<typeof scheduledRun>,
): Promise<{ outcome: 'completed' | 'failed' | 'duplicate'; generation?: number; detail?: string }> {
  try {
    const result = await handle.result();
    // A run the budget guard blocked is done for its slot (Temporal closed it Completed); the detail says why.
    if (result.status === 'blocked') return { outcome: 'completed', generation: result.generation, detail: 'blocked: budget exhausted' };
    // The schedule's fingerprint named no applied version (task_versions): nothing ran, the slot is unclaimed.
    if (result.status === 'rejected') return { outcome: 'failed', detail: `rejected: ${result.rejected ?? ''}` };
    return { outcome: result.status, generation: result.generation };
  } catch (err) {
    if (err instanceof WorkflowFailedError) return { outcome: 'failed', detail: err.cause?.message ?? err.message };
    throw err;
  }
}

function summarise(results: SlotResult[]): BackfillSummary {
  const count = (o: SlotOutcome) => results.filter((r) => r.outcome === o).length;
  return {
    slots: results.length,
    completed: count('completed'),
    retried: count('retried'),
    alreadyRan: count('already-ran'),
    running: count('running'),
    failed: count('failed'),
  };
}
