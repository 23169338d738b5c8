import type pg from 'pg';

export interface RunRow {
  id: string;
  idempotency_key: string;
  task_id: string;
  user_id: string;
  workflow_id: string;
  temporal_run_id: string;
  scheduled_minute: Date;
  status: 'running' | 'completed' | 'failed';
  claimed_by: string;
  claimed_at: Date;
  finished_at: Date | null;
  duration_ms: string | null;
  error: string | null;
}

export interface ClaimRequest {
  idempotencyKey: string;
  taskId: string;
  userId: string;
  workflowId: string;
  temporalRunId: string;
  scheduledMinute: string;
  workerId: string;
}

/**
 * Claims a slot: the first insert of its idempotency key wins. A workflow execution that claimed it before (its own
 * claim activity retried) still counts as the owner; any other execution is recorded as a duplicate and must stop.
 */
export async function claimRun(db: pg.Pool, c: ClaimRequest): Promise<{ claimed: boolean; ownerWorkflowRunId: string }> {
  const inserted = await db.query(
    `insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, claimed_by)
     values ($1, $2, $3, $4, $5, $6, $7)
     on conflict (idempotency_key) do nothing`,
    [c.idempotencyKey, c.taskId, c.userId, c.workflowId, c.temporalRunId, c.scheduledMinute, c.workerId],
  );
  if (inserted.rowCount === 1) return { claimed: true, ownerWorkflowRunId: c.temporalRunId };
  const owner = await db.query<{ temporal_run_id: string }>('select temporal_run_id from runs where idempotency_key = $1', [
    c.idempotencyKey,
  ]);
  const ownerRunId = owner.rows[0].temporal_run_id;
  if (ownerRunId === c.temporalRunId) return { claimed: true, ownerWorkflowRunId: ownerRunId };
  await db.query(
    `insert into run_duplicates (temporal_run_id, workflow_id, idempotency_key, task_id, user_id, detected_by)
     values ($1, $2, $3, $4, $5, $6) on conflict do nothing`,
    [c.temporalRunId, c.workflowId, c.idempotencyKey, c.taskId, c.userId, c.workerId],
  );
  return { claimed: false, ownerWorkflowRunId: ownerRunId };
}

/** Closes a claimed run. Only a running row changes, so a retried completion is harmless. */
export async function completeRun(
  db: pg.Pool,
  c: { idempotencyKey: string; status: 'completed' | 'failed'; error?: string },
): Promise<void> {
  await db.query(
    `update runs set status = $2, error = $3, finished_at = now(),
            duration_ms = (extract(epoch from (now() - claimed_at)) * 1000)::bigint
      where idempotency_key = $1 and status = 'running'`,
    [c.idempotencyKey, c.status, c.error ?? null],
  );
}

export async function listRuns(db: pg.Pool, filter: { taskId?: string; limit?: number } = {}): Promise<RunRow[]> {
  const { rows } = await db.query<RunRow>(
    `select * from runs where ($1::text is null or task_id = $1) order by scheduled_minute desc, id desc limit $2`,
    [filter.taskId ?? null, filter.limit ?? 100],
  );
  return rows;
}
