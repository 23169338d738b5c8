import type pg from 'pg';
import { memoryParams, type MemoryInput } from './memories';

export type RunStatus = 'running' | 'completed' | 'failed' | 'cancelled' | 'blocked' | 'rejected';

/** The budget tier a run ran at (null: before the budget guard, or a run that never reached its decision). */
export type RunTier = 'default' | 'cheap' | 'blocked';

/** The slot's claim: one row per idempotency key, naming the execution (generation) that currently owns it. */
export interface RunRow {
  id: string;
  idempotency_key: string;
  task_id: string;
  user_id: string;
  workflow_id: string;
  temporal_run_id: string;
  scheduled_minute: Date;
  status: RunStatus;
  /** Which execution of the slot owns the claim: 1 for the first, +1 for each retry that took it over. */
  generation: number;
  manual: boolean;
  claimed_by: string;
  claimed_at: Date;
  finished_at: Date | null;
  duration_ms: string | null;
  error: string | null;
  tier: RunTier | null;
  /** A blocked run's reason: the limit, spent and reserved it was decided on (exact decimal strings). */
  budget: Record<string, unknown> | null;
}

/** One execution that owned a claim: every generation of a slot keeps its row here. */
export interface RunAttemptRow {
  id: string;
  idempotency_key: string;
  generation: number;
  workflow_id: string;
  temporal_run_id: string;
  status: RunStatus | 'stale';
  claimed_by: string;
  started_at: Date;
  finished_at: Date | null;
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
  manual?: boolean;
  /** Take the claim over from this execution (Temporal run ID), if it still owns it and did not complete. */
  supersedesRunId?: string;
}

export interface ClaimOutcome {
  claimed: boolean;
  /** The execution that owns the claim after this call. */
  ownerWorkflowRunId: string;
  generation: number;
  /** Why a claim was refused, for the duplicate's log and result. */
  ownerStatus?: RunStatus;
}

/**
 * Claims a slot, in one statement (claim_run). The first insert of its idempotency key wins
 * (generation 1). An execution that already owns it (its own claim activity retried) still counts as the owner. A
 * retry may take the claim over, in one compare-and-set, only from the execution it names and only while that claim is
 * not completed; the old owner's attempt is then closed as 'stale' if it never recorded an outcome (terminated, timed
 * out). Anyone else is recorded as a duplicate and must stop.
 */
export async function claimRun(db: pg.Pool, c: ClaimRequest): Promise<ClaimOutcome> {
  const { rows } = await db.query<{ claim: ClaimOutcome }>({
    name: 'claim-run',
    text: 'select claim_run($1, $2, $3, $4, $5, $6, $7, $8, $9) as claim',
    values: claimValues(c),
  });
  return rows[0].claim;
}

/** claim_run's first nine arguments (claim_and_reserve's too), in order. */
export const claimValues = (c: ClaimRequest): unknown[] => [
  c.idempotencyKey,
  c.taskId,
  c.userId,
  c.workflowId,
  c.temporalRunId,
  c.scheduledMinute,
  c.workerId,
  c.manual ?? false,
  c.supersedesRunId ?? null,
];

/** What closes one execution's claim: its status and, for a run that got that far, the tier and the budget reason. */
export interface RunCompletion {
  idempotencyKey: string;
  temporalRunId: string;
  status: Exclude<RunStatus, 'running'>;
  error?: string;
  tier?: RunTier;
  budget?: Record<string, unknown>;
}

export const completionParams = (c: RunCompletion) => [
  c.idempotencyKey,
  c.temporalRunId,
  c.status,
  c.error ?? null,
  c.tier ?? null,
  c.budget ? JSON.stringify(c.budget) : null,
];

/**
 * Closes the claim of one execution and its attempt row (complete_run, migrations/032_roles_by_job.sql). Only a running
 * claim that this execution still owns changes, so a retried completion is harmless and an execution that a retry
 * superseded can never overwrite the new generation's outcome.
 */
export async function completeRun(db: pg.Pool, c: RunCompletion): Promise<void> {
  await db.query('select complete_run($1, $2, $3, $4, $5, $6)', completionParams(c));
}

/** Stores what a completed run remembers (once per execution) and closes its claim, in one statement. */
export async function storeRunMemoryAndComplete(db: pg.Pool, c: RunCompletion, m: MemoryInput): Promise<void> {
  // named: each connection parses and plans it once (it returns no rows, so no result type to go stale)
  await db.query({
    name: 'store-memory-and-complete-run',
    text: 'select store_memory_and_complete_run($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)',
    values: [...completionParams(c), ...memoryParams(m)],
  });
}

export async function listRuns(db: pg.Pool, filter: { taskId?: string; limit?: number } = {}): Promise<RunRow[]> {
  const { rows } = await db.query<RunRow>(
    `select * from runs where ($1::text is null or task_id = $1) order by scheduled_minute desc, id desc limit $2`,
    [filter.taskId ?? null, filter.limit ?? 100],
  );
  return rows;
}

/** The claim of one slot (or manual run), or null when nothing claimed it yet. */
export async function claimOf(db: pg.Pool, idempotencyKey: string): Promise<RunRow | null> {
  const { rows } = await db.query<RunRow>('select * from runs where idempotency_key = $1', [idempotencyKey]);
  return rows[0] ?? null;
}

/**
 * The claim a retry may take over: a slot's claim that is not completed (failed, cancelled, or running; whether a
 * running claim's execution is really closed, i.e. stale, is for the caller to check with Temporal). Null when the
 * slot was never claimed or is completed. Pass its temporal_run_id as the retry's `supersedesRunId`.
 */
export async function retryableClaim(db: pg.Pool, idempotencyKey: string): Promise<RunRow | null> {
  const claim = await claimOf(db, idempotencyKey);
  return claim && claim.status !== 'completed' && claim.status !== 'blocked' ? claim : null;
}

/** Every execution that owned the slot's claim, oldest generation first. */
export async function listRunAttempts(db: pg.Pool, idempotencyKey: string): Promise<RunAttemptRow[]> {
  const { rows } = await db.query<RunAttemptRow>('select * from run_attempts where idempotency_key = $1 order by generation', [
    idempotencyKey,
  ]);
  return rows;
}

/** A claimed run with what its executions booked (usage, adjustments and reconciliation; credits are per user). */
export interface RunWithCost extends RunRow {
  cost_usd: string;
  entries: string;
}

// What the runs `r` booked: every execution's rows under the slot's workflow ID.
const RUN_COST_JOIN = `left join lateral (
         select sum(l.cost_usd) as cost_usd, count(*) as entries
           from usage_ledger l where l.workflow_id = r.workflow_id and l.entry_type <> 'credit') c on true`;
const RUN_COST_COLUMNS = `r.*, coalesce(c.cost_usd, 0)::numeric(38, 18)::text as cost_usd, coalesce(c.entries, 0)::text as entries`;

/** The newest runs (optionally of one user or task), each with the exact sum of its ledger rows, for the admin page. */
export async function latestRunsWithCost(
  db: pg.Pool,
  filter: { userId?: string; taskId?: string; workflowId?: string; limit?: number } = {},
): Promise<RunWithCost[]> {
  const { rows } = await db.query<RunWithCost>(
    `select ${RUN_COST_COLUMNS}
       from (select * from runs where ($1::text is null or user_id = $1) and ($2::text is null or task_id = $2)
                and ($4::text is null or workflow_id = $4)
              order by scheduled_minute desc, id desc limit $3) r
       ${RUN_COST_JOIN}
      order by r.scheduled_minute desc, r.id desc`,
    [filter.userId ?? null, filter.taskId ?? null, filter.limit ?? 100, filter.workflowId ?? null],
  );
  return rows;
}

/** latestRunsWithCost for each of the given tasks (its newest `limit`), in one query: the Tasks page's one round trip. */
export async function latestRunsWithCostPerTask(db: pg.Pool, taskIds: string[], limit: number): Promise<Map<string, RunWithCost[]>> {
  const { rows } = await db.query<RunWithCost>(
    `select ${RUN_COST_COLUMNS}
       from unnest($1::text[]) as t(task_id)
       cross join lateral (
         select * from runs where runs.task_id = t.task_id order by scheduled_minute desc, id desc limit $2
       ) r
       ${RUN_COST_JOIN}
      order by r.task_id, r.scheduled_minute desc, r.id desc`,
    [taskIds, limit],
  );
  const byTask = new Map<string, RunWithCost[]>(taskIds.map((id) => [id, []]));
  for (const row of rows) byTask.get(row.task_id)!.push(row);
  return byTask;
}

/**
 * Executions that stopped as duplicates in [from, to), per local day of the zone (and user or task): claimed runs
 * are counted from the run rollups (reports/rollups-read.ts); these few are read from their own table.
 */
export async function duplicatesPerDay(
  db: pg.Pool,
  zone: string,
  from: string,
  to: string,
  by: 'all' | 'user' | 'task' = 'all',
): Promise<{ day: string; key: string; runs: string }[]> {
  const key = by === 'user' ? 'user_id' : by === 'task' ? 'task_id' : `''`;
  const { rows } = await db.query<{ day: string; key: string; runs: string }>(
    `select to_char(detected_at at time zone $1, 'YYYY-MM-DD') as day, ${key} as key, count(*)::text as runs
       from run_duplicates where detected_at >= $2 and detected_at < $3 group by 1, 2 order by 1, 2`,
    [zone, from, to],
  );
  return rows;
}

/**
 * The scheduled minutes a task's slots were claimed for in [from, to] (manual runs are not slots), oldest first: what
 * the missed-slot check holds against the schedule's expected times. Any claim counts, whatever became of its run; a
 * rejected start (no applied version) claimed nothing.
 */
export async function slotClaimMinutes(db: pg.Pool, taskId: string, from: Date, to: Date): Promise<Date[]> {
  const { rows } = await db.query<{ scheduled_minute: Date }>(
    `select scheduled_minute from runs where task_id = $1 and not manual and status <> 'rejected' and scheduled_minute >= $2 and scheduled_minute <= $3
      order by scheduled_minute`,
    [taskId, from, to],
  );
  return rows.map((r) => r.scheduled_minute);
}
