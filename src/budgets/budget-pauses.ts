import type pg from 'pg';

/**
 * Tasks whose schedule cronledger paused because their user's money ran out (onBudgetExhausted "pause"), append-only
 * (migration 036): budget_pauses when a blocked run paused it, budget_pause_ends when the budget sweeper resumed it.
 * The report counts the slots a pause skipped as "skipped for budget", and the missed-slot check leaves them out.
 */

export interface BudgetPauseRequest {
  taskId: string;
  userId: string;
  /** The reason the schedule's note gives. */
  reason: string;
  /** The budget month that ran out, `YYYY-MM` in timeZone. */
  month: string;
  timeZone: string;
  limitUsd: string | null;
  /** The blocked run (Temporal run ID) that pauses the task: recorded once. */
  runId: string;
  at: Date;
}

/** Records the pause, unless the task has one still open; returns the open pause and whether this call recorded it. */
export async function recordBudgetPause(db: pg.Pool, p: BudgetPauseRequest): Promise<{ pauseId: number | null; recorded: boolean }> {
  const { rows } = await db.query<{ r: { pauseId: number | null; recorded: boolean } }>(
    'select record_budget_pause($1, $2, $3, $4, $5, $6, $7, $8) as r',
    [p.taskId, p.userId, p.reason, `${p.month}-01`, p.timeZone, p.limitUsd, p.runId, p.at],
  );
  return rows[0].r;
}

export interface DuePause {
  pauseId: number;
  taskId: string;
  cause: 'month-turnover' | 'limit-raised';
  pausedAt: Date;
}

/** The open pauses to resume at `at`: the month turned over in the pause's zone, or the user's limit was raised. */
export async function budgetPausesDue(db: pg.Pool, at: Date): Promise<DuePause[]> {
  const { rows } = await db.query<{ pause_id: string; task_id: string; cause: DuePause['cause']; paused_at: Date }>(
    'select d.pause_id, d.task_id, d.cause, p.paused_at from budget_pauses_due($1) d join budget_pauses p on p.id = d.pause_id',
    [at],
  );
  return rows.map((r) => ({ pauseId: Number(r.pause_id), taskId: r.task_id, cause: r.cause, pausedAt: r.paused_at }));
}

/** The sweeper resumed the pause's schedule at `at`, and these many slots fell in the pause unclaimed. Recorded once. */
export async function recordBudgetResume(db: pg.Pool, pauseId: number, at: Date, cause: DuePause['cause'], skippedSlots: number) {
  await db.query('select record_budget_resume($1, $2, $3, $4)', [pauseId, at, cause, skippedSlots]);
}

export interface PauseInterval {
  pausedAt: Date;
  /** null: still paused. */
  resumedAt: Date | null;
}

/** A task's budget pauses that overlap [from, to], oldest first. */
export async function budgetPauseIntervals(db: pg.Pool, taskId: string, from: Date, to: Date): Promise<PauseInterval[]> {
  const { rows } = await db.query<{ paused_at: Date; resumed_at: Date | null }>(
    `select paused_at, resumed_at from budget_pause_intervals
      where task_id = $1 and paused_at <= $3 and (resumed_at is null or resumed_at >= $2) order by paused_at`,
    [taskId, from, to],
  );
  return rows.map((r) => ({ pausedAt: r.paused_at, resumedAt: r.resumed_at }));
}

/** Whether `t` fell while the task was paused for budget (an open pause lasts until now). */
export const inPause = (t: Date, pauses: PauseInterval[]): boolean =>
  pauses.some((p) => t >= p.pausedAt && (p.resumedAt === null || t <= p.resumedAt));

/** A task's budget pauses in a report's period, as the report counts them. */
export interface TaskPauseFigures {
  taskId: string;
  userId: string;
  /** Slots skipped for budget by the task's pauses that began in the period (counted when the sweeper resumed them). */
  skippedSlots: number;
  /** Paused for budget at the period's end (or now, while it runs): its skipped slots are counted once it resumes. */
  paused: boolean;
}

/**
 * Per task with a budget pause that began before the period's end: the slots skipped for budget by its pauses that
 * began in the period, and whether it is still paused at the end. The one rule for "skipped for budget": the report
 * sums it, the admin page shows it per task and per user.
 */
export async function budgetPauseFiguresByTask(db: pg.Pool, from: Date, to: Date): Promise<TaskPauseFigures[]> {
  const { rows } = await db.query<{ task_id: string; user_id: string; skipped: string; paused: boolean }>(
    `select task_id, min(user_id) as user_id,
            coalesce(sum(skipped_slots) filter (where paused_at >= $1 and paused_at < $2), 0) as skipped,
            bool_or(resumed_at is null or resumed_at >= $2) as paused
       from budget_pause_intervals where paused_at < $2 group by task_id order by task_id`,
    [from, to],
  );
  return rows.map((r) => ({ taskId: r.task_id, userId: r.user_id, skippedSlots: Number(r.skipped), paused: r.paused }));
}

/**
 * For a report's period: the slots skipped for budget by pauses that began in it (counted when the sweeper resumed
 * them), and the tasks still paused for budget at its end.
 */
export async function budgetPauseFigures(db: pg.Pool, from: Date, to: Date): Promise<{ skippedSlots: number; pausedTasks: number }> {
  const tasks = await budgetPauseFiguresByTask(db, from, to);
  return { skippedSlots: tasks.reduce((n, t) => n + t.skippedSlots, 0), pausedTasks: tasks.filter((t) => t.paused).length };
}
