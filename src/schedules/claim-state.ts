import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { RunRow } from '../db/runs';

/**
 * Where a slot's claim stands. `stale`: PostgreSQL says running, but the execution it names is closed without having
 * completed (terminated or timed out: no workflow code ran to record it), or is gone from Temporal (past retention).
 * `rejected`: a start that named no applied version, recorded under a key of its own; never a slot's claim, never retried.
 */
export type ClaimState = 'running' | 'stale' | 'completed' | 'failed' | 'cancelled' | 'blocked' | 'rejected';

/** Claims in these states may be run again on purpose (`runs retry`, `backfill --retry-failed`). */
export const isRetryable = (state: ClaimState): boolean => state === 'failed' || state === 'cancelled' || state === 'stale';

/** A claim's state; for a running claim, asks Temporal whether the execution it names is still open. */
export async function claimState(client: Client, claim: Pick<RunRow, 'status' | 'workflow_id' | 'temporal_run_id'>): Promise<ClaimState> {
  if (claim.status !== 'running') return claim.status;
  try {
    const { status } = await client.workflow.getHandle(claim.workflow_id, claim.temporal_run_id).describe();
    // A completed execution always completed its claim first, so only a closed, not completed one is stale.
    return status.name === 'RUNNING' || status.name === 'COMPLETED' ? 'running' : 'stale';
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return 'stale';
    throw err;
  }
}
