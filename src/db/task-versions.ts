import type pg from 'pg';
import type { ServiceTier } from '../models/provider';
import type { SimulateProfile } from '../models/simulate-profile';

/** What a run reads of an applied task: the tasks file's entry, stored whole as applied (defaults filled in). */
export interface AppliedTask {
  userId: string;
  input: string;
  model: string;
  embeddingModel: string;
  maxOutputTokens: number;
  simulate?: SimulateProfile;
  serviceTier?: ServiceTier;
  /** The most one run's worst case may cost, USD (exact decimal string); unset: no cap. */
  maxCostPerRun?: string;
  /** What the schedule does when the user's budget is exhausted; unset: block. */
  onBudgetExhausted?: 'block' | 'pause';
}

/** One applied version of a task: what `tasks apply` recorded under the fingerprint its schedule names. */
export interface TaskVersion {
  taskId: string;
  fingerprint: string;
  /** The task as applied (the tasks file's entry, defaults filled in). */
  definition: AppliedTask;
}

/**
 * Records these versions in task_versions (append-only, migration 026): a version applied before is left as it was.
 * Called before any schedule names a fingerprint, so no run can start for a version that is not recorded yet.
 */
export async function recordTaskVersions(db: pg.Pool, versions: TaskVersion[]): Promise<void> {
  if (versions.length === 0) return;
  await db.query('select record_task_versions($1)', [
    JSON.stringify(versions.map((v) => ({ task_id: v.taskId, fingerprint: v.fingerprint, definition: v.definition }))),
  ]);
}

/** The definition applied under this task ID and fingerprint; undefined when no apply recorded that version. */
export async function appliedVersion(db: pg.Pool, taskId: string, fingerprint: string): Promise<AppliedTask | undefined> {
  const { rows } = await db.query<{ definition: AppliedTask }>({
    name: 'applied-version',
    text: 'select definition from task_versions where task_id = $1 and fingerprint = $2',
    values: [taskId, fingerprint],
  });
  return rows[0]?.definition;
}

/**
 * Records a run that named no applied version as `rejected`, under a key of its own (`rejected:<Temporal run ID>`), so
 * it takes no slot's claim and reserves nothing. Its user is unknown (a forged input's user is not believed): ''. Run
 * again by the same execution, it records nothing more.
 */
export async function recordRejectedRun(
  db: pg.Pool,
  r: {
    taskId: string;
    workflowId: string;
    temporalRunId: string;
    scheduledMinute: string;
    workerId: string;
    manual: boolean;
    reason: string;
  },
): Promise<void> {
  await db.query('select record_rejected_run($1, $2, $3, $4, $5, $6, $7)', [
    r.taskId,
    r.workflowId,
    r.temporalRunId,
    r.scheduledMinute,
    r.workerId,
    r.manual,
    r.reason,
  ]);
}
