import type pg from 'pg';
import { atto, usdOf } from '../budgets/tier';
import { worstCaseOf } from '../budgets/worst-case';
import type { AppliedTask } from '../db/task-versions';
import { fromDatabaseError } from '../ledger/prices';
import { DEFAULT_COST_SAMPLE, MIN_RUNS_FOR_COST, type Band, type RunCost } from './projection';

/**
 * Per task, the median and the 95th percentile (nearest rank: percentile_disc, so each is the cost of a real run,
 * exact) of what its last `sample` completed runs cost: the sum of each run's ledger rows (every execution of its
 * slot, credits aside), as the admin page's run costs. Tasks without completed runs come back with 0 runs.
 */
export async function completedRunCosts(
  db: pg.Pool | pg.PoolClient,
  taskIds: string[],
  sample = DEFAULT_COST_SAMPLE,
): Promise<Map<string, { runs: number; medianUsd: string | null; p95Usd: string | null }>> {
  const { rows } = await db.query<{ task_id: string; runs: number; median: string | null; p95: string | null }>(
    `select t.task_id, count(r.workflow_id)::int as runs,
            (percentile_disc(0.5) within group (order by c.cost))::text as median,
            (percentile_disc(0.95) within group (order by c.cost))::text as p95
       from unnest($1::text[]) t(task_id)
       left join lateral (
         select workflow_id from runs where runs.task_id = t.task_id and runs.status = 'completed'
          order by scheduled_minute desc, id desc limit $2) r on true
       left join lateral (
         select coalesce(sum(l.cost_usd), 0) as cost
           from usage_ledger l where l.workflow_id = r.workflow_id and l.entry_type <> 'credit') c on r.workflow_id is not null
      group by t.task_id`,
    [taskIds, sample],
  );
  return new Map(
    rows.map((r) => [
      r.task_id,
      { runs: r.runs, medianUsd: r.median === null ? null : usdOf(atto(r.median)), p95Usd: r.p95 === null ? null : usdOf(atto(r.p95)) },
    ]),
  );
}

/**
 * The most one run of the task can cost at `at`: the budget guard's worst case of its chat and embedding calls
 * (worstCaseOf, priced by worst_case_cost in SQL), on the models it asks for.
 */
export async function runWorstCaseUsd(db: pg.Pool | pg.PoolClient, task: AppliedTask, at: Date): Promise<string> {
  const worst = worstCaseOf({
    prompt: task.input,
    maxOutputTokens: task.maxOutputTokens,
    simulate: task.simulate,
    serviceTier: task.serviceTier,
  });
  const call = (kind: string, usage: typeof worst.chat) =>
    JSON.stringify({ kind, prompt: usage.promptTokens, completion: usage.completionTokens, tier: usage.serviceTier });
  const { rows } = await db
    .query<{ usd: string }>(`select (worst_case_cost($1::jsonb, $2, $5) + worst_case_cost($3::jsonb, $4, $5))::text as usd`, [
      call('chat', worst.chat),
      task.model,
      call('embedding', worst.embedding),
      task.embeddingModel,
      at,
    ])
    .catch((err: unknown) => {
      throw fromDatabaseError(err);
    });
  return usdOf(atto(rows[0].usd));
}

/**
 * Each task's cost per run: the median and p95 of its last `sample` completed runs, or with fewer than
 * MIN_RUNS_FOR_COST of them the guard's worst case (both figures), or 0 for a task with no applied version.
 */
export async function runCosts(
  db: pg.Pool | pg.PoolClient,
  tasks: { taskId: string; definition: AppliedTask | undefined }[],
  at: Date,
  sample = DEFAULT_COST_SAMPLE,
): Promise<Map<string, RunCost>> {
  const measured = await completedRunCosts(
    db,
    tasks.map((t) => t.taskId),
    sample,
  );
  const out = new Map<string, RunCost>();
  for (const { taskId, definition } of tasks) {
    const m = measured.get(taskId) ?? { runs: 0, medianUsd: null, p95Usd: null };
    if (m.runs >= MIN_RUNS_FOR_COST && m.medianUsd !== null && m.p95Usd !== null) {
      out.set(taskId, { basis: 'runs', runs: m.runs, medianUsd: m.medianUsd, p95Usd: m.p95Usd });
    } else if (!definition) {
      out.set(taskId, { basis: 'unapplied', runs: m.runs, medianUsd: usdOf(0n), p95Usd: usdOf(0n) });
    } else {
      const worst = await runWorstCaseUsd(db, definition, at);
      out.set(taskId, { basis: 'worst-case', runs: m.runs, medianUsd: worst, p95Usd: worst });
    }
  }
  return out;
}

/** The bands of the limit as the database defines them (budget_bands: cheap from 80 %, blocked from 100 %). */
export async function budgetBands(db: pg.Pool | pg.PoolClient): Promise<Band[]> {
  const { rows } = await db.query<{ tier: string; from_percent: number }>(
    'select tier, from_percent from budget_bands() order by from_percent',
  );
  return rows.map((r) => ({ tier: r.tier, fromPercent: r.from_percent }));
}

/** The month of `at` in `timeZone` (`YYYY-MM`) and the instant it ends there. */
export async function monthEndIn(db: pg.Pool | pg.PoolClient, at: Date, timeZone: string): Promise<{ month: string; end: Date }> {
  const { rows } = await db.query<{ month: string; end: Date }>(
    `select to_char(budget_month_of($1, $2), 'YYYY-MM') as month,
            ((budget_month_of($1, $2) + interval '1 month')::timestamp at time zone $2) as end`,
    [at, timeZone],
  );
  return rows[0];
}
