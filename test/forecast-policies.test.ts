import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyBudgets } from '../src/budgets/budgets-store';
import { worstCaseOf } from '../src/budgets/worst-case';
import { recordForecast } from '../src/forecast/forecast-records';
import { monthForecast, type MonthForecast } from '../src/forecast/month-forecast';
import { applyPrices, loadPricesFile, priceInForce } from '../src/ledger/prices';
import { formatScaled, LEDGER_SCALE } from '../src/money';
import { applyTasks } from '../src/schedules/apply-tasks';
import { taskSchedules } from '../src/schedules/scheduled-tasks';
import { parseTasksFile } from '../src/tasks/tasks-file';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { startTestAdmin } from './support/admin-server';
import { bookCompletion } from './support/budget-spend';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { finishedRun } from './support/forecast-runs';
import { oracleCost } from './support/cost-oracle';

/**
 * The month-end forecast honours each task's policies, against real Temporal schedules and PostgreSQL:
 * maxCostPerRun by the guard's own rule (budget_cap_choice: the cheap models' worst case, or blocked), and, past the
 * limit, slots that the guard would block (onBudgetExhausted "block") or that a budget pause would skip ("pause")
 * spend nothing, while the every-slot figure and the day the limit is reached still say what the schedules ask for.
 */

let ctx: TestContext;
const PROMPT = 'Summarise the day.';
const usd = (atto: bigint) => formatScaled(atto, LEDGER_SCALE);
/** gpt-4o-mini completion tokens cost $0.60 per million: `n` tokens cost n × 0.0000006 exactly. */
const tokenCost = (n: number) => BigInt(n) * 600_000_000_000n;
/** February 2027 in UTC: 28 days, nothing spent in it. */
const AT = new Date('2027-02-01T00:00:00Z');
let fullWorst: bigint;
let cheapWorst: bigint;

const task = (id: string, userId: string, cron: string, extra: Record<string, unknown> = {}) => ({
  id,
  cron,
  userId,
  input: PROMPT,
  maxOutputTokens: 100,
  ...extra,
});

/** One run's worst case (chat on `model`, the embedding on its own), priced by the test's oracle. */
async function worstCase(model: string): Promise<bigint> {
  const w = worstCaseOf({ prompt: PROMPT, maxOutputTokens: 100 });
  return (
    oracleCost('chat', w.chat, await priceInForce(ctx.pool, model, AT)) +
    oracleCost('embedding', w.embedding, await priceInForce(ctx.pool, 'openai/text-embedding-3-small', AT))
  );
}

/** A completed run of `taskId` whose ledger rows cost `completionTokens` gpt-4o-mini tokens, booked now. */
async function completedRun(taskId: string, userId: string, n: number, completionTokens: number) {
  return finishedRun(ctx, { taskId, userId, minute: new Date(Date.UTC(2026, 9, n, 3)), completionTokens });
}

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await applyBudgets(
    ctx.operatorPool,
    {
      budgets: [{ userId: 'pol-user', monthlyLimitUsd: '0.012', timeZone: 'UTC', effectiveFrom: new Date('2026-01-01T00:00:00Z') }],
      downgrade: { 'openai/gpt-4o-mini': 'openai/gpt-4.1-nano' },
    },
    'test',
  );
  fullWorst = await worstCase('openai/gpt-4o-mini');
  cheapWorst = await worstCase('openai/gpt-4.1-nano');
  const between = usd((fullWorst + cheapWorst) / 2n);
  await applyTasks(
    ctx.client,
    parseTasksFile({
      tasks: [
        task('pol-pause', 'pol-user', '0 6 * * *', { onBudgetExhausted: 'pause' }),
        task('pol-block', 'pol-user', '0 18 * * *', { onBudgetExhausted: 'block' }),
        task('cap-down', 'cap-user', '0 12 * * *', { maxCostPerRun: between }),
        task('cap-block', 'cap-user', '0 13 * * *', { maxCostPerRun: usd(cheapWorst / 2n) }),
        task('cap-measured', 'cap-user', '0 14 * * *', { maxCostPerRun: between }),
        task('skip-resumed', 'skip-user', '0 9 * * *', { onBudgetExhausted: 'pause' }),
        task('skip-open', 'skip-user', '0 10 * * *', { onBudgetExhausted: 'pause' }),
        task('chart-weekdays', 'chart-user', '0 9 * * 1-5'),
      ],
      monthlyReport: false,
      budgetSweep: false,
    }),
    ctx.taskQueue,
    ctx.operatorPool,
  );
  // five completed runs each: pol-pause $0.0006 a run, pol-block $0.0012, cap-measured $0.60 (dearer than any worst case)
  for (let i = 1; i <= 5; i++) {
    await completedRun('pol-pause', 'pol-user', i, 1000);
    await completedRun('pol-block', 'pol-user', i, 2000);
    await completedRun('cap-measured', 'cap-user', i, 1_000_000);
    await completedRun('chart-weekdays', 'chart-user', i, 1000);
  }
});

afterAll(async () => ctx?.close());

const forecastAt = async (userId: string): Promise<MonthForecast> =>
  monthForecast(ctx.pool, await taskSchedules(ctx.client, ctx.pool), { at: AT, userId });
const taskOf = (f: MonthForecast, id: string) => f.tasks.find((t) => t.taskId === id)!;

describe('maxCostPerRun', () => {
  it("costs a run at most the cheap models' worst case when the cap rules the default ones out, and says so", async () => {
    expect(cheapWorst).toBeLessThan(fullWorst);
    const f = await forecastAt('cap-user');
    const down = taskOf(f, 'cap-down');
    expect(down.cost).toEqual({
      basis: 'worst-case',
      runs: 0,
      medianUsd: usd(cheapWorst),
      p95Usd: usd(cheapWorst),
      capped: {
        maxCostPerRunUsd: usd((fullWorst + cheapWorst) / 2n),
        choice: 'cheap',
        uncappedMedianUsd: usd(fullWorst),
        uncappedP95Usd: usd(fullWorst),
      },
    });
    expect(down).toMatchObject({
      slotsLeft: 28,
      medianUsd: usd(28n * cheapWorst),
      slotOutcomes: { median: { run: 28, blocked: 0, skipped: 0 } },
    });
    // measured runs dearer than the cap allows: capped at the worst case of the models the guard would run
    expect(taskOf(f, 'cap-measured').cost).toMatchObject({
      basis: 'runs',
      runs: 5,
      medianUsd: usd(cheapWorst),
      capped: { choice: 'cheap', uncappedMedianUsd: usd(tokenCost(1_000_000)) },
    });
  });

  it('blocks every run when even the cheap models are over the cap: nothing spent, every slot counted as blocked', async () => {
    const f = await forecastAt('cap-user');
    expect(taskOf(f, 'cap-block')).toMatchObject({
      cost: { medianUsd: usd(0n), p95Usd: usd(0n), capped: { choice: 'blocked', uncappedMedianUsd: usd(fullWorst) } },
      slotsLeft: 28,
      medianUsd: usd(0n),
      allSlotsMedianUsd: usd(0n),
      slotOutcomes: { median: { run: 0, blocked: 28, skipped: 0 }, high: { run: 0, blocked: 28, skipped: 0 } },
    });
    const r = await runCli(['forecast', '--task', 'cap-block'], ctx.env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(
      /cap-block\s+cap-user\s+active\s+block, cap \$\S+\s+\d+\s+\$\S+\s+\$\S+\s+worst case \(0 runs\); capped: blocked\s+0\s+\d+\s+0/,
    );
    expect(r.stdout).toContain("capped: a task's maxCostPerRun rules out its default models");
  });
});

describe('past the limit', () => {
  it('spends nothing for slots the guard would block or a budget pause would skip, and counts them per task', async () => {
    const f = await forecastAt('pol-user');
    // 06:00 pol-pause $0.0006, 18:00 pol-block $0.0012 daily from $0; the limit $0.012. Day 7: 0.0114 after 06:00, and
    // 18:00's $0.0012 does not fit: blocked. Day 8: 06:00 fits exactly ($0.012); from then on the month is at its limit:
    // pol-block's runs are blocked, pol-pause's first is blocked and pauses it, so its 19 later slots are skipped.
    expect(taskOf(f, 'pol-pause')).toMatchObject({
      onBudgetExhausted: 'pause',
      maxCostPerRunUsd: null,
      slotsLeft: 28,
      slotOutcomes: { median: { run: 8, blocked: 1, skipped: 19 }, high: { run: 8, blocked: 1, skipped: 19 } },
      medianUsd: usd(8n * tokenCost(1000)),
      allSlotsMedianUsd: usd(28n * tokenCost(1000)),
    });
    expect(taskOf(f, 'pol-block')).toMatchObject({
      onBudgetExhausted: 'block',
      slotOutcomes: { median: { run: 6, blocked: 22, skipped: 0 } },
      medianUsd: usd(6n * tokenCost(2000)),
      allSlotsMedianUsd: usd(28n * tokenCost(2000)),
    });
    const limit = 12n * 10n ** 15n;
    expect(f.users).toEqual([
      {
        userId: 'pol-user',
        month: '2027-02',
        timeZone: 'UTC',
        limitUsd: usd(limit),
        spentUsd: usd(0n),
        reservedUsd: usd(0n),
        medianUsd: usd(limit),
        highUsd: usd(limit),
        allSlotsMedianUsd: usd(28n * tokenCost(3000)),
        allSlotsHighUsd: usd(28n * tokenCost(3000)),
        medianOverLimit: true,
        highOverLimit: true,
        // the every-slot total reaches $0.0096 at 06:00 on the 6th and $0.0126 at 18:00 on the 7th, the first blocked slot
        crossings: [
          { tier: 'cheap', percent: 80, medianDay: '2027-02-06', highDay: '2027-02-06' },
          { tier: 'blocked', percent: 100, medianDay: '2027-02-07', highDay: '2027-02-07' },
        ],
        slotOutcomes: { median: { run: 14, blocked: 23, skipped: 19 }, high: { run: 14, blocked: 23, skipped: 19 } },
        // what can be spent by each day's end: $0.0018 a day to the 6th, then 06:00 alone on the 7th and the 8th
        spendByDay: [3000, 6000, 9000, 12_000, 15_000, 18_000, 19_000, 20_000].map((tokens, i) => ({
          day: `2027-02-0${i + 1}`,
          medianUsd: usd(tokenCost(tokens)),
          highUsd: usd(tokenCost(tokens)),
        })),
      },
    ]);
  });

  it('records what can be spent, and fires forecast-over-limit on what every slot would cost', async () => {
    const [user] = (await forecastAt('pol-user')).users;
    expect(await recordForecast(ctx.pool, user, AT)).toEqual(['budget-forecast:pol-user:UTC:2027-02']);
    const { rows } = await ctx.pool.query(
      `select median_usd::text as median, all_slots_median_usd::text as all_median, all_slots_high_usd::text as all_high
         from budget_forecasts where user_id = 'pol-user'`,
    );
    expect(rows).toEqual([{ median: usd(12n * 10n ** 15n), all_median: usd(28n * tokenCost(3000)), all_high: usd(28n * tokenCost(3000)) }]);
    const events = await ctx.pool.query(`select forecast_usd::text as f from budget_events where kind = 'forecast-over-limit'`);
    expect(events.rows).toEqual([{ f: usd(28n * tokenCost(3000)) }]);
  });

  it('forecast and budgets status show run, blocked and skipped slots, and their JSON the new fields beside the old', async () => {
    const table = await runCli(['forecast', '--user', 'pol-user'], ctx.env);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/POLICY\s+SLOTS LEFT.*FROM\s+RUN\s+BLOCKED\s+SKIPPED\s+FORECAST MEDIAN\s+FORECAST HIGH/);
    expect(table.stdout).toMatch(/pol-pause\s+pol-user\s+active\s+pause\s+\d+/);
    const json = JSON.parse((await runCli(['forecast', '--user', 'pol-user', '--json'], ctx.env)).stdout);
    const pause = json.tasks.find((t: { taskId: string }) => t.taskId === 'pol-pause');
    // this month, from now: the figures depend on the day, their shape does not
    const { run, blocked, skipped } = pause.slotOutcomes.median;
    expect(run + blocked + skipped).toBe(pause.slotsLeft);
    expect(pause).toMatchObject({
      onBudgetExhausted: 'pause',
      maxCostPerRunUsd: null,
      allSlotsMedianUsd: expect.stringMatching(/^\d+\.\d{18}$/),
    });
    expect(json.users[0]).toMatchObject({ medianOverLimit: expect.any(Boolean), allSlotsHighUsd: expect.stringMatching(/^\d+\.\d{18}$/) });

    const status = await runCli(['budgets', 'status', '--user', 'pol-user'], ctx.env);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toMatch(/FORECAST MEDIAN\s+FORECAST HIGH\s+80 % ON\s+100 % ON\s+SLOTS RUN\s+BLOCKED\s+SKIPPED/);
    const statusJson = JSON.parse((await runCli(['budgets', 'status', '--user', 'pol-user', '--json'], ctx.env)).stdout);
    expect(statusJson.forecast[0]).toMatchObject({ userId: 'pol-user', slotOutcomes: { median: { skipped: expect.any(Number) } } });
  });
});

describe('the admin page: skipped for budget', () => {
  it("shows per task and per user the slots skipped for budget, the report's figure, beside the missed slots", async () => {
    // this month: skip-resumed was paused for budget and resumed with 7 slots skipped; skip-open is paused still
    const month = (await ctx.pool.query<{ m: string }>(`select to_char(now() at time zone 'UTC', 'YYYY-MM') as m`)).rows[0].m;
    const pause = async (taskId: string, runId: string) =>
      (
        await ctx.ownerPool.query<{ r: { pauseId: number } }>(
          `select record_budget_pause($1, 'skip-user', 'test', $2::date, 'UTC', 0, $3, now() - interval '2 hours') as r`,
          [taskId, `${month}-01`, runId],
        )
      ).rows[0].r.pauseId;
    const resumed = await pause('skip-resumed', 'run-skip-1');
    await ctx.ownerPool.query(`select record_budget_resume($1, now() - interval '1 hour', 'limit-raised', 7)`, [resumed]);
    await pause('skip-open', 'run-skip-2');
    await bookCompletion(ctx.pool, 'skip-spend', 'skip-user', 1000); // the users page lists users with spend

    const report = await runCli(['report', '--month', month, '--format', 'json'], ctx.env);
    expect(report.code, report.stderr).toBe(0);
    expect(JSON.parse(report.stdout).budget.skippedForBudget).toEqual({ slots: 7, pausedTasks: 1 });

    const readonly = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 2);
    const admin = await startTestAdmin(ctx, readonly);
    try {
      const { users } = await (await fetch(`${admin.url}/api/users`)).json();
      expect(users.find((u: { userId: string }) => u.userId === 'skip-user')).toMatchObject({
        skippedForBudget: 7,
        tasksPausedForBudget: 1,
      });
      const { tasks } = await (await fetch(`${admin.url}/api/tasks`)).json();
      const byId = (id: string) => tasks.find((t: { id: string }) => t.id === id);
      expect(byId('skip-resumed').budgetPauses).toEqual({ taskId: 'skip-resumed', userId: 'skip-user', skippedSlots: 7, paused: false });
      expect(byId('skip-open').budgetPauses).toMatchObject({ skippedSlots: 0, paused: true });
      expect(byId('pol-pause').budgetPauses).toBeNull();

      const tasksHtml = await (await fetch(`${admin.url}/tasks`)).text();
      expect(tasksHtml).toMatch(/Missed slots<\/th><th data-type="int" tabindex="0">Skipped for budget<\/th>/);
      const inRow = '(?:(?!</tr>)[\\s\\S])*?';
      expect(tasksHtml).toMatch(new RegExp(`<tr data-task="skip-resumed"${inRow}<td class="num" data-sort="7">\\s*7\\s*</td>`));
      expect(tasksHtml).toMatch(
        new RegExp(`<tr data-task="skip-open"${inRow}<td class="num" data-sort="0">\\s*0<div class="muted">paused</div>`),
      );
      const usersHtml = await (await fetch(`${admin.url}/users`)).text();
      expect(usersHtml).toMatch(/Skipped for budget/);
      expect(usersHtml).toMatch(new RegExp(`skip-user</a></td>${inRow}<td class="num" data-sort="7">\\s*7<div class="muted">paused</div>`));
    } finally {
      await admin.close();
      await readonly.end();
    }
  });
});

describe("the admin user page's forecast band", () => {
  it("rises on the days the schedule spends and stays flat on the others: a weekday task's weekends", async () => {
    const [user] = (await forecastAt('chart-user')).users;
    // 20 weekdays in February 2027 at $0.0006 a run, no limit: the steps' last day is Friday the 26th
    expect(user.spendByDay).toHaveLength(20);
    expect(user.spendByDay.at(-1)).toEqual({
      day: '2027-02-26',
      medianUsd: usd(20n * tokenCost(1000)),
      highUsd: usd(20n * tokenCost(1000)),
    });
    expect(user.spendByDay.map((d) => d.day)).not.toContain('2027-02-06');
    await recordForecast(ctx.pool, user, AT);

    const readonly = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 2);
    const admin = await startTestAdmin(ctx, readonly);
    try {
      const page = await (await fetch(`${admin.url}/users/chart-user?month=2027-02&tz=UTC`)).text();
      const points = (re: RegExp) =>
        new Map(
          re
            .exec(page)![1]
            .split(' ')
            .map((p) => p.split(',').map(Number) as [number, number]),
        );
      const median = points(/<polyline\s+class="median"\s+points="([\d., ]+)"/);
      // 28 days across 700 px from x = 10: each day's end at 10 + 25 × its number; the band from the 1st (Monday)
      expect([...median.keys()]).toEqual(Array.from({ length: 29 }, (_, d) => 10 + 25 * d));
      const at = (day: number) => median.get(10 + 25 * day)!;
      expect(at(4)).toBeGreaterThan(at(5)); // Friday the 5th rises (a higher figure is drawn higher up)
      expect([at(6), at(7)]).toEqual([at(5), at(5)]); // Saturday and Sunday: flat
      expect(at(8)).toBeLessThan(at(7)); // Monday rises again
      expect([at(27), at(28)]).toEqual([at(26), at(26)]); // the last weekend too
      // the band: its high edge left to right, then its median edge back (both the same steps here: one cost per run)
      const band = /<polygon\s+class="band"\s+points="([\d., ]+)"/.exec(page)![1].split(' ');
      expect(band).toHaveLength(58);
    } finally {
      await admin.close();
      await readonly.end();
    }
  });
});
