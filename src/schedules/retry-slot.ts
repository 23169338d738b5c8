import { WorkflowExecutionAlreadyStartedError, WorkflowFailedError, type Client } from '@temporalio/client';
import type pg from 'pg';
import { taskScheduleId } from '../constants';
import { claimOf, type RunRow } from '../db/runs';
import { UserError } from '../errors';
import { manualKey, slotKey } from '../workflows/scheduled-time';
import { claimState, isRetryable, type ClaimState } from './claim-state';
import { slotTimes } from './slot-times';
import { appliedTask, startRun } from './start-run';

export interface RetryResult {
  workflowId: string;
  /** Temporal run ID of the retry's execution. */
  runId: string;
  /** The claim's state before the retry. */
  was: ClaimState;
  outcome: 'completed' | 'failed' | 'duplicate';
  generation?: number;
  detail?: string;
}

/** Refuses, with the reason and what to do, a claim that may not be retried: completed, or still running. */
export async function requireRetryable(client: Client, claim: RunRow): Promise<ClaimState> {
  const state = await claimState(client, claim);
  if (state === 'completed') {
    throw new UserError(
      `${claim.workflow_id} completed (generation ${claim.generation}, run ${claim.temporal_run_id}); a completed slot is never run again`,
    );
  }
  if (!isRetryable(state)) {
    throw new UserError(
      `${claim.workflow_id} is still running (run ${claim.temporal_run_id}); let it finish, or cancel or terminate it first, then retry`,
    );
  }
  return state;
}

/**
 * Runs a failed, cancelled or stale slot again, under the workflow ID that owns its claim, with
 * ALLOW_DUPLICATE_FAILED_ONLY (so Temporal itself refuses when that ID's last execution completed, and the Web UI
 * shows the executions side by side); when that last execution was a duplicate, the claim decides. The run takes the claim over from the execution named in PostgreSQL
 * (`retry.supersedesRunId`), only if that one still owns it and did not complete. Waits for the retry's result.
 */
export async function retrySlot(client: Client, claim: RunRow, was: ClaimState): Promise<RetryResult> {
  const applied = await appliedTask(client, claim.task_id);
  const extra = { ...(claim.manual ? { manual: true } : {}), retry: { supersedesRunId: claim.temporal_run_id } };
  let handle;
  try {
    handle = await startRun(client, applied, { workflowId: claim.workflow_id, reusePolicy: 'ALLOW_DUPLICATE_FAILED_ONLY', extra });
  } catch (err) {
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    // The ID's last execution completed or runs. Running: refuse. Completed: it was a duplicate that stopped at the
    // claim (e.g. a native backfill after the failure), since the claim says the slot did not complete. Temporal only
    // sees that last execution; the claim decides, and its compare-and-set still lets at most one retry take it.
    const last = await client.workflow.getHandle(claim.workflow_id).describe();
    if (last.status.name === 'RUNNING') {
      throw new UserError(`${claim.workflow_id} has a running execution (run ${last.runId}); let it finish, then retry`);
    }
    handle = await startRun(client, applied, { workflowId: claim.workflow_id, reusePolicy: 'ALLOW_DUPLICATE', extra });
  }
  const base = { workflowId: claim.workflow_id, runId: handle.firstExecutionRunId, was };
  try {
    const result = await handle.result();
    if (result.status === 'blocked')
      return { ...base, outcome: 'completed', generation: result.generation, detail: 'blocked: budget exhausted' };
    // The schedule's fingerprint named no applied version (task_versions): nothing ran, the slot is as it was.
    if (result.status === 'rejected') return { ...base, outcome: 'failed', detail: `rejected: ${result.rejected ?? ''}` };
    return { ...base, outcome: result.status, generation: result.generation };
  } catch (err) {
    if (err instanceof WorkflowFailedError) return { ...base, outcome: 'failed', detail: err.cause?.message ?? err.message };
    throw err;
  }
}

/** `cron-<taskId>-<nominal>` or `cron-<taskId>-manual-<start>`: the claim key a slot's (or manual run's) workflow ID names. */
export function claimKeyOfWorkflowId(workflowId: string): string {
  const manual = /^cron-(.+)-manual-(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)$/.exec(workflowId);
  if (manual) return manualKey(manual[1], new Date(manual[2]));
  const slot = /^cron-(.+)-(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)$/.exec(workflowId);
  if (slot) return slotKey(slot[1], new Date(slot[2]));
  throw new UserError(
    `--workflow-id ${JSON.stringify(workflowId)} is not a cronledger run's ID; it looks like cron-<taskId>-2026-11-02T09:00:00Z (see \`cronledger runs\`)`,
  );
}

/** `runs retry --workflow-id`: the one slot, refused with the reason when it completed, runs, or never ran. */
export async function retryWorkflowId(client: Client, pool: pg.Pool, workflowId: string): Promise<RetryResult> {
  const key = claimKeyOfWorkflowId(workflowId);
  const claim = await claimOf(pool, key);
  if (!claim) {
    throw new UserError(`${workflowId} never claimed its slot (${key}), so there is nothing to retry; run it with \`cronledger backfill\``);
  }
  return retrySlot(client, claim, await requireRetryable(client, claim));
}

export interface RangeRetry {
  slot: string;
  workflowId: string;
  /** The claim's state before; `unclaimed` when the slot never ran (backfill runs those, not retry). */
  state: ClaimState | 'unclaimed';
  retry?: RetryResult;
  /** Why a retryable slot was not run again (e.g. an execution under its ID is running): the message, with its fix. */
  refused?: string;
}

/**
 * `runs retry --task --from --to`: every slot of the range whose claim failed, was cancelled or is stale, run again. A
 * slot that is refused (a UserError: its ID has a running execution, its task lost its schedule) is reported with the
 * reason, and the other slots are still retried.
 */
export async function retryRange(client: Client, pool: pg.Pool, taskId: string, from: Date, to: Date): Promise<RangeRetry[]> {
  const out: RangeRetry[] = [];
  for (const slot of await slotTimes(client, taskScheduleId(taskId), from, to)) {
    const claim = await claimOf(pool, slotKey(taskId, slot));
    const slotText = slot.toISOString().replace(/\.\d{3}Z$/, 'Z');
    if (!claim) {
      out.push({ slot: slotText, workflowId: `${taskScheduleId(taskId)}-${slotText}`, state: 'unclaimed' });
      continue;
    }
    const state = await claimState(client, claim);
    const base = { slot: slotText, workflowId: claim.workflow_id, state };
    if (!isRetryable(state)) {
      out.push(base);
      continue;
    }
    try {
      out.push({ ...base, retry: await retrySlot(client, claim, state) });
    } catch (err) {
      if (!(err instanceof UserError)) throw err;
      out.push({ ...base, refused: err.message });
    }
  }
  return out;
}
