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

/** What a task's maxCostPerRun makes of its runs at `at`: the guard's own rule (budget_cap_choice). */
export interface RunCap {
  /** `default`: no cap, or the worst case is within it; `cheap`: runs on the cheap models; `blocked`: every run is blocked. */
  choice: 'default' | 'cheap' | 'blocked';
  /** The worst case of one run on the models it would run on (the cheap ones under `cheap`; 0 when blocked). */
  worstCaseUsd: string;
}

/**
 * The most one run of the task can cost at `at`, and what its maxCostPerRun makes of it: the budget guard's worst case
 * of its chat and embedding calls (worstCaseOf, priced by worst_case_cost in SQL) on the models it asks for, then the
 * guard's cap rule (budget_cap_choice, the function reserve_budget decides the cap with) on those calls.
 */
export async function runWorstCase(db: pg.Pool | pg.PoolClient, task: AppliedTask, at: Date): Promise<RunCap & { uncappedUsd: string }> {
  const worst = worstCaseOf({
    prompt: task.input,
    maxOutputTokens: task.maxOutputTokens,
    simulate: task.simulate,
    serviceTier: task.serviceTier,
  });
  const call = (kind: string, usage: typeof worst.chat) =>
    JSON.stringify({ kind, prompt: usage.promptTokens, completion: usage.completionTokens, tier: usage.serviceTier });
  const { rows } = await db
    .query<{ usd: string; choice: RunCap['choice']; cheap: string | null }>(
      `select w.usd::text as usd, c.choice, c.worst::text as cheap
         from (select worst_case_cost($1::jsonb, $2, $5) + worst_case_cost($3::jsonb, $4, $5) as usd) w
         cross join lateral budget_cap_choice(jsonb_build_array($1::jsonb, $3::jsonb), array[$2, $4], w.usd, $6::numeric, true, $5) c`,
      [call('chat', worst.chat), task.model, call('embedding', worst.embedding), task.embeddingModel, at, task.maxCostPerRun ?? null],
    )
    .catch((err: unknown) => {
      throw fromDatabaseError(err);
    });
  const { usd, choice, cheap } = rows[0];
  const uncappedUsd = usdOf(atto(usd));
  const worstCaseUsd = choice === 'default' ? uncappedUsd : choice === 'cheap' ? usdOf(atto(cheap!)) : usdOf(0n);
  return { choice, worstCaseUsd, uncappedUsd };
}

/** The lesser of two exact amounts. */
const least = (a: string, b: string): string => (atto(a) <= atto(b) ? a : b);

/**
 * Each task's cost per run: the median and p95 of its last `sample` completed runs, or with fewer than
 * MIN_RUNS_FOR_COST of them the guard's worst case (both figures), or 0 for a task with no applied version. A task
 * whose maxCostPerRun rules its default models out (budget_cap_choice) costs at most the worst case of the models it
 * would run on: the cheap ones, or nothing when every run is blocked; its `capped` says so and what it cost without.
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
    const fromRuns = m.runs >= MIN_RUNS_FOR_COST && m.medianUsd !== null && m.p95Usd !== null;
    if (!definition) {
      out.set(
        taskId,
        fromRuns
          ? { basis: 'runs', runs: m.runs, medianUsd: m.medianUsd!, p95Usd: m.p95Usd! }
          : { basis: 'unapplied', runs: m.runs, medianUsd: usdOf(0n), p95Usd: usdOf(0n) },
      );
      continue;
    }
    const needsWorst = !fromRuns || definition.maxCostPerRun !== undefined;
    const worst = needsWorst ? await runWorstCase(db, definition, at) : undefined;
    const cost: RunCost = fromRuns
      ? { basis: 'runs', runs: m.runs, medianUsd: m.medianUsd!, p95Usd: m.p95Usd! }
      : { basis: 'worst-case', runs: m.runs, medianUsd: worst!.uncappedUsd, p95Usd: worst!.uncappedUsd };
    if (worst && worst.choice !== 'default') {
      const capped = { medianUsd: least(cost.medianUsd, worst.worstCaseUsd), p95Usd: least(cost.p95Usd, worst.worstCaseUsd) };
      out.set(taskId, {
        ...cost,
        ...capped,
        capped: {
          maxCostPerRunUsd: usdOf(atto(definition.maxCostPerRun!)),
          choice: worst.choice,
          uncappedMedianUsd: cost.medianUsd,
          uncappedP95Usd: cost.p95Usd,
        },
      });
    } else {
      out.set(taskId, cost);
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
