import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook as Verifier } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBudgetActivities } from '../src/activities/budget-activities';
import { applyBudgets } from '../src/budgets/budgets-store';
import { worstCaseOf } from '../src/budgets/worst-case';
import { monthForecast, type MonthForecast } from '../src/forecast/month-forecast';
import { applyPrices, loadPricesFile, priceInForce } from '../src/ledger/prices';
import { formatScaled, LEDGER_SCALE } from '../src/money';
import { applyTasks } from '../src/schedules/apply-tasks';
import { taskSchedules } from '../src/schedules/scheduled-tasks';
import { parseTasksFile } from '../src/tasks/tasks-file';
import { budgetSweep } from '../src/workflows/budget-sweep';
import { bookExactSpend } from './support/budget-spend';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { finishedRun } from './support/forecast-runs';
import { oracleCost } from './support/cost-oracle';
import { startWorkers } from './support/workers';
import { startTestAdmin } from './support/admin-server';
import { createPool, readOnlySessionUrl } from '../src/db/pool';

/**
 * The month-end forecast against real Temporal schedules and PostgreSQL: slots counted by the Temporal server from each
 * schedule's own spec (to the month's end in the budget's zone, across a DST change, paused tasks none, jitter at
 * nominal times), the cost of a run from the last completed runs (or the guard's worst case), the days the bands are
 * reached, the forecast-over-limit event, and the backfill that does not fit.
 */

let ctx: TestContext;
const PROMPT = 'Summarise the day.';
/** gpt-4o-mini completion tokens cost $0.60 per million: `n` tokens cost n × 0.0000006 exactly. */
const usd = (atto: bigint) => formatScaled(atto, LEDGER_SCALE);
const tokenCost = (n: number) => BigInt(n) * 600_000_000_000n; // 0.0000006 USD = 6 × 10^11 atto-USD

const task = (id: string, userId: string, cron: string, extra: Record<string, unknown> = {}) => ({
  id,
  cron,
  userId,
  input: PROMPT,
  maxOutputTokens: 100,
  ...extra,
});

const TASKS = [
  task('hourly-berlin', 'f-berlin', '0 * * * *'),
  task('hourly-utc', 'f-utc', '0 * * * *'),
  task('paused-hourly', 'f-utc', '0 * * * *', { paused: true }),
  task('daily-0230', 'f-ny', '30 2 * * *'),
  task('hourly-jitter', 'f-jit', '0 * * * *', { jitter: '30m' }),
  task('measured', 'f-cost', '0 3 * * *'),
  task('young', 'f-cost', '0 4 * * *'),
  task('cross-daily', 'f-cross', '0 12 * * *'),
  // paused: backfilled only (a schedule that fired into the tests' workers would add runs to its costs)
  task('burst', 'f-backfill', '*/5 * * * *', { paused: true }),
];

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await applyTasks(ctx.client, parseTasksFile({ tasks: TASKS, monthlyReport: false, budgetSweep: false }), ctx.taskQueue, ctx.operatorPool);
  const since = new Date('2026-01-01T00:00:00Z');
  await applyBudgets(
    ctx.ownerPool,
    {
      budgets: [
        { userId: 'f-berlin', monthlyLimitUsd: '100', timeZone: 'Europe/Berlin', effectiveFrom: since },
        { userId: 'f-utc', monthlyLimitUsd: '100', timeZone: 'UTC', effectiveFrom: since },
        { userId: 'f-ny', monthlyLimitUsd: '100', timeZone: 'America/New_York', effectiveFrom: since },
        { userId: 'f-cross', monthlyLimitUsd: '0.012', timeZone: 'UTC', effectiveFrom: since },
      ],
    },
    'test',
  );
});

afterAll(async () => ctx?.close());

/** A completed run of `taskId` whose ledger rows cost `completionTokens` gpt-4o-mini tokens, booked now. */
async function completedRun(taskId: string, userId: string, minute: Date, completionTokens: number, status = 'completed') {
  return finishedRun(ctx, { taskId, userId, minute, completionTokens, status });
}

const day = (n: number) => new Date(Date.UTC(2026, 10, n, 3));
const forecastAt = async (at: Date, opts: { userId?: string; taskId?: string; sample?: number } = {}): Promise<MonthForecast> =>
  monthForecast(ctx.pool, await taskSchedules(ctx.client, ctx.pool), { at, ...opts });
const taskOf = (f: MonthForecast, id: string) => f.tasks.find((t) => t.taskId === id)!;

describe('slots left this month', () => {
  it("counts to the month's end in the budget's zone, the 25-hour day of the DST change included", async () => {
    // 22:00 UTC on 24 October is midnight in Berlin; October ends there at 23:00 UTC on the 31st (CET again)
    const at = new Date('2026-10-24T22:00:00Z');
    // Berlin: 22:00 UTC on the 24th to 22:00 UTC on the 31st, one a hour: 7 × 24 + 1 (the hour the clocks go back)
    expect(taskOf(await forecastAt(at, { userId: 'f-berlin' }), 'hourly-berlin').slotsLeft).toBe(169);
    // UTC: October ends an hour later, at midnight UTC
    expect(taskOf(await forecastAt(at, { userId: 'f-utc' }), 'hourly-utc').slotsLeft).toBe(170);
  });

  it("crosses the UTC month's end when the budget's month ends later (New York)", async () => {
    // 02:30 UTC daily; October ends in New York at 04:00 UTC on 1 November: the 31st's slot and 1 November's
    const f = await forecastAt(new Date('2026-10-30T12:00:00Z'), { userId: 'f-ny' });
    expect(taskOf(f, 'daily-0230').slotsLeft).toBe(2);
    expect(f.users[0]).toMatchObject({ userId: 'f-ny', month: '2026-10', timeZone: 'America/New_York' });
  });

  it('gives a paused task none, and a jittered one its nominal times', async () => {
    const at = new Date('2026-10-30T12:00:00Z');
    const utc = await forecastAt(at, { userId: 'f-utc' });
    expect(taskOf(utc, 'paused-hourly')).toMatchObject({ state: 'paused', slotsLeft: 0, medianUsd: usd(0n) });
    // no budget: the UTC month; 12:00 on the 30th to 23:00 on the 31st
    expect(taskOf(await forecastAt(at, { userId: 'f-jit' }), 'hourly-jitter').slotsLeft).toBe(36);
  });
});

describe('the cost of a run', () => {
  beforeAll(async () => {
    // 7 completed runs of 1,000 .. 7,000 tokens, one failed run of 1,000,000 (not a completed run), 4 runs of `young`
    for (let i = 1; i <= 7; i++) await completedRun('measured', 'f-cost', day(i), i * 1000);
    await completedRun('measured', 'f-cost', day(8), 1_000_000, 'failed');
    for (let i = 1; i <= 4; i++) await completedRun('young', 'f-cost', day(i), 5000);
  });

  it('is the median and the p95 of the last completed runs, exact', async () => {
    const at = new Date('2026-10-30T12:00:00Z');
    const all = taskOf(await forecastAt(at, { userId: 'f-cost' }), 'measured');
    expect(all.cost).toEqual({ basis: 'runs', runs: 7, medianUsd: usd(tokenCost(4000)), p95Usd: usd(tokenCost(7000)) });
    // 3 am daily from the 30th at noon: the 31st only
    expect(all).toMatchObject({ slotsLeft: 1, medianUsd: usd(tokenCost(4000)), highUsd: usd(tokenCost(7000)) });
    // the last 5 runs (3,000 .. 7,000 tokens)
    const five = taskOf(await forecastAt(at, { userId: 'f-cost', sample: 5 }), 'measured');
    expect(five.cost).toEqual({ basis: 'runs', runs: 5, medianUsd: usd(tokenCost(5000)), p95Usd: usd(tokenCost(7000)) });
  });

  it("is the guard's worst case, flagged, for a task with fewer than 5 completed runs", async () => {
    const now = new Date();
    const w = worstCaseOf({ prompt: PROMPT, maxOutputTokens: 100 });
    const worst =
      oracleCost('chat', w.chat, await priceInForce(ctx.pool, 'openai/gpt-4o-mini', now)) +
      oracleCost('embedding', w.embedding, await priceInForce(ctx.pool, 'openai/text-embedding-3-small', now));
    const young = taskOf(await forecastAt(now, { userId: 'f-cost' }), 'young');
    expect(young.cost).toEqual({ basis: 'worst-case', runs: 4, medianUsd: usd(worst), p95Usd: usd(worst) });

    const r = await runCli(['forecast', '--task', 'young'], ctx.env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/young\s+f-cost\s+active\s+block\s+\d+\s+\$\S+\s+\$\S+\s+worst case \(4 runs\)/);
    expect(r.stdout).toContain("forecast at the budget guard's worst case per run");
  });
});

describe('per user', () => {
  let monthStart: Date;
  let daysInMonth: number;
  beforeAll(async () => {
    // five completed runs of 1,000 tokens ($0.0006 each, $0.003 spent this month); the limit is $0.012
    for (let i = 1; i <= 5; i++) await completedRun('cross-daily', 'f-cross', day(i), 1000);
    const { rows } = await ctx.pool.query<{ m: Date; n: number }>(
      `select date_trunc('month', now() at time zone 'UTC') at time zone 'UTC' as m,
              extract(day from date_trunc('month', now() at time zone 'UTC') + interval '1 month' - interval '1 day')::int as n`,
    );
    monthStart = rows[0].m;
    daysInMonth = rows[0].n;
  });

  it('adds spent, reserved and the tasks, and names the days 80 % and 100 % are reached', async () => {
    const f = await forecastAt(monthStart, { userId: 'f-cross' });
    const run = tokenCost(1000);
    expect(taskOf(f, 'cross-daily').slotsLeft).toBe(daysInMonth);
    const spent = 5n * run;
    const month = monthStart.toISOString().slice(0, 7);
    // 0.003 + k × 0.0006 reaches 0.0096 (80 %) at k = 11 and 0.012 at k = 15: the 11th and the 15th, at noon
    expect(f.users).toEqual([
      {
        userId: 'f-cross',
        month,
        timeZone: 'UTC',
        limitUsd: usd(12n * 10n ** 15n),
        spentUsd: usd(spent),
        reservedUsd: usd(0n),
        // 15 slots fit the limit exactly; the rest would be blocked and spend nothing
        medianUsd: usd(12n * 10n ** 15n),
        highUsd: usd(12n * 10n ** 15n),
        allSlotsMedianUsd: usd(spent + BigInt(daysInMonth) * run),
        allSlotsHighUsd: usd(spent + BigInt(daysInMonth) * run),
        medianOverLimit: true,
        highOverLimit: true,
        crossings: [
          { tier: 'cheap', percent: 80, medianDay: `${month}-11`, highDay: `${month}-11` },
          { tier: 'blocked', percent: 100, medianDay: `${month}-15`, highDay: `${month}-15` },
        ],
        slotOutcomes: {
          median: { run: 15, blocked: daysInMonth - 15, skipped: 0 },
          high: { run: 15, blocked: daysInMonth - 15, skipped: 0 },
        },
        spendByDay: Array.from({ length: 15 }, (_, k) => ({
          day: `${month}-${String(k + 1).padStart(2, '0')}`,
          medianUsd: usd(spent + BigInt(k + 1) * run),
          highUsd: usd(spent + BigInt(k + 1) * run),
        })),
      },
    ]);
  });

  it('budgets status shows the forecast columns, and its JSON the forecast beside the figures', async () => {
    const r = await runCli(['budgets', 'status', '--user', 'f-cross'], ctx.env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/FORECAST MEDIAN\s+FORECAST HIGH\s+80 % ON\s+100 % ON/);
    const json = JSON.parse((await runCli(['budgets', 'status', '--user', 'f-cross', '--json'], ctx.env)).stdout);
    expect(json.forecast).toEqual([expect.objectContaining({ userId: 'f-cross', medianOverLimit: true })]);
    expect(json.forecast[0].medianUsd).toMatch(/^\d+\.\d{18}$/);
  });

  it('refuses bad input with the value and the fix', async () => {
    const runs = await runCli(['forecast', '--runs', '0'], ctx.env);
    expect(runs.code).toBe(2);
    expect(runs.stderr).toMatch(/--runs "0" is not a whole number from 1 to 10000/);
    const unknown = await runCli(['forecast', '--task', 'no-such-task'], ctx.env);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/task "no-such-task" has no cronledger schedule/);
    const future = await runCli(['forecast', '--month', '2999-01'], ctx.env);
    expect(future.code).toBe(2);
    expect(future.stderr).toMatch(/--month 2999-01 has not begun/);
  });
});

/** The budget webhook's signing secret (whsec_ and base64), as BUDGET_WEBHOOK_SECRET holds it. */
const SECRET = `whsec_${randomBytes(32).toString('base64')}`;

describe('the forecast-over-limit event and the daily record', () => {
  it('records one event per user and month, and one forecast a day, however often it is forecast', async () => {
    const activities = createBudgetActivities({
      pool: ctx.pool,
      workerId: 'test',
      simulateHonoured: true,
      budgetWebhookUrl: '',
      taskSchedules: () => taskSchedules(ctx.client, ctx.pool),
    });
    const first = await activities.forecastBudgets();
    const month = (await ctx.pool.query<{ m: string }>(`select to_char(now() at time zone 'UTC', 'YYYY-MM') as m`)).rows[0].m;
    expect(first.eventIds).toEqual([`budget-forecast:f-cross:UTC:${month}`]);
    const recorded = await ctx.pool.query('select user_id, median_usd::text, computed_at from budget_forecasts order by user_id');
    // every user with a task, a budget or spend; f-backfill has a task and no limit yet
    expect(recorded.rows.map((r) => r.user_id)).toEqual(['f-backfill', 'f-berlin', 'f-cost', 'f-cross', 'f-jit', 'f-ny', 'f-utc']);

    const second = await activities.forecastBudgets();
    expect(second.eventIds).toEqual([]);
    expect((await ctx.pool.query('select user_id, median_usd::text, computed_at from budget_forecasts order by user_id')).rows).toEqual(
      recorded.rows,
    );
    const events = await ctx.pool.query(`select event_id, kind, threshold from budget_events where kind = 'forecast-over-limit'`);
    expect(events.rows).toEqual([{ event_id: `budget-forecast:f-cross:UTC:${month}`, kind: 'forecast-over-limit', threshold: 100 }]);
  });

  it('the budget sweep delivers it to the budget webhook, signed, as budget.forecast-over-limit', async () => {
    // a fresh month's event: the previous test's is recorded (and undelivered: it had no webhook)
    const posts: { body: { type: string; eventId: string; forecastUsd: string }; verified: boolean }[] = [];
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString('utf8')));
      req.on('end', () => {
        let verified = true;
        try {
          new Verifier(SECRET).verify(body, req.headers as Record<string, string>);
        } catch {
          verified = false;
        }
        posts.push({ body: JSON.parse(body), verified });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
    try {
      const fleet = await startWorkers(ctx, 1, {
        budgetWebhookUrl: url,
        budgetWebhookSecret: SECRET,
        budgetEventRetrySeconds: 0,
        taskSchedules: () => taskSchedules(ctx.client, ctx.pool),
      });
      await fleet.runWhile(async () => {
        for (const n of [1, 2]) {
          const result = await ctx.client.workflow.execute(budgetSweep, {
            args: [{ forecastEveryMinutes: 1 }],
            workflowId: `sweep-forecast-${n}-${Date.now()}`,
            taskQueue: ctx.taskQueue,
          });
          expect(result.forecastUsers).toBe(7);
        }
      });
    } finally {
      server.close();
    }
    const forecastPosts = posts.filter((p) => p.body.type === 'budget.forecast-over-limit');
    expect(forecastPosts).toHaveLength(1);
    expect(forecastPosts[0].verified).toBe(true);
    expect(forecastPosts[0].body).toMatchObject({ eventId: expect.stringMatching(/^budget-forecast:f-cross:UTC:/) });
    expect(forecastPosts[0].body.forecastUsd).toMatch(/^\d+\.\d{18}$/);
  });
});

describe('the admin page', () => {
  it("shows the recorded forecast: the user's band, the overview's list of users over their limit, the budgets column", async () => {
    const readonly = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 2);
    const admin = await startTestAdmin(ctx, readonly);
    try {
      const [recorded] = (
        await ctx.pool.query<{ median: string; high: string }>(
          `select median_usd::text as median, high_usd::text as high from budget_forecasts where user_id = 'f-cross'`,
        )
      ).rows;
      const { budgets } = await (await fetch(`${admin.url}/api/budgets`)).json();
      expect(budgets.find((b: { userId: string }) => b.userId === 'f-cross')).toMatchObject({
        forecastMedianUsd: recorded.median,
        forecastHighUsd: recorded.high,
      });
      const overview = await (await fetch(`${admin.url}/api/overview`)).json();
      expect(overview.forecastOverLimit.map((f: { userId: string }) => f.userId)).toEqual(['f-cross']);
      const page = await (await fetch(`${admin.url}/users/f-cross`)).text();
      expect(page).toMatch(/<svg viewBox="0 0 720 240" role="img"/);
      expect(page).toMatch(/<polygon\s+class="band"\s+points="[\d., ]+"/);
      expect(page).toMatch(/<line class="limit"/);
      expect(await (await fetch(`${admin.url}/`)).text()).toMatch(/id="forecast-over-limit"[\s\S]*f-cross/);
    } finally {
      await admin.close();
      await readonly.end();
    }
  });
});

describe('a past month', () => {
  it('holds the forecast recorded on its first day against what it spent, in forecast --month and in the report', async () => {
    // October: forecast $0.011 (median) to $0.012 (high) on the 1st; $0.010 spent
    await ctx.ownerPool.query(`select record_forecast('f-past', 'UTC', '2026-10-01', '2026-10-01', 0.011, 0.012, 0.02, 0, 0)`);
    await ctx.ownerPool.query(`select record_forecast('f-past', 'UTC', '2026-10-01', '2026-10-02', 0.5, 0.5, 0.02, 0, 0)`);
    await bookExactSpend(ctx.ownerPool, 'past-spend', 'f-past', '0.01', new Date('2026-10-15T12:00:00Z'));
    const r = await runCli(['forecast', '--month', '2026-10', '--user', 'f-past', '--json'], ctx.env);
    expect(r.code, r.stderr).toBe(0);
    const expected = {
      userId: 'f-past',
      timeZone: 'UTC',
      month: '2026-10',
      forecastDay: '2026-10-01',
      limitUsd: usd(2n * 10n ** 16n),
      medianUsd: usd(11n * 10n ** 15n),
      highUsd: usd(12n * 10n ** 15n),
      spentUsd: usd(10n ** 16n),
      medianErrorPercent: '10.0',
      withinHigh: true,
    };
    expect(JSON.parse(r.stdout).users).toEqual([expected]);
    const report = await runCli(['report', '--month', '2026-10', '--format', 'json'], ctx.env);
    expect(report.code, report.stderr).toBe(0);
    expect(JSON.parse(report.stdout).budget.forecasts).toEqual([expected]);
  });
});

describe('backfill against the forecast', () => {
  const FROM = '2026-11-02T09:00:00Z';
  const TO = '2026-11-02T10:35:00Z'; // */5: 20 slots
  beforeAll(async () => {
    // 5 completed runs of 1,000 tokens: $0.0006 a run; limit $0.01, nothing spent but those runs ($0.003)
    for (let i = 1; i <= 5; i++) await completedRun('burst', 'f-backfill', day(i), 1000);
    await applyBudgets(ctx.ownerPool, { budgets: [{ userId: 'f-backfill', monthlyLimitUsd: '0.01', timeZone: 'UTC' }] }, 'test');
  });

  /** No execution of the range's first or last slot exists. */
  const expectNothingStarted = async () => {
    for (const slot of [FROM, '2026-11-02T10:35:00Z']) {
      await expect(ctx.client.workflow.getHandle(`cron-burst-${slot}`).describe()).rejects.toThrow(/not found/i);
    }
  };

  it('refuses a range that does not fit, naming the figures and both ways out, and starts nothing', async () => {
    const r = await runCli(['backfill', '--task', 'burst', '--from', FROM, '--to', TO], ctx.env);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/does not fit the monthly budget of f-backfill/);
    expect(r.stderr).toMatch(/--dry-run/);
    expect(r.stderr).toMatch(/--allow-over-budget/);
    const started = await ctx.pool.query(
      `select count(*)::int as n from runs where task_id = 'burst' and scheduled_minute between $1 and $2`,
      [FROM, TO],
    );
    expect(started.rows[0].n).toBe(0);
    await expectNothingStarted();
  });

  it('--dry-run counts what the guard would run, downgrade and block, and starts nothing', async () => {
    const r = await runCli(['backfill', '--task', 'burst', '--from', FROM, '--to', TO, '--dry-run', '--json'], ctx.env);
    expect(r.code, r.stderr).toBe(0);
    const { budget } = JSON.parse(r.stdout);
    // from $0.003 spent, $0.0006 a run: 9 start below $0.008 (80 %, the last from $0.0078), 2 more fit (from $0.0084 and
    // $0.009), and from $0.0096 none fits: 9 blocked
    expect(budget).toEqual([
      expect.objectContaining({ userId: 'f-backfill', slots: 20, alreadyClaimed: 0, run: 9, downgraded: 2, blocked: 9, fits: false }),
    ]);
    expect(budget[0].totalUsd).toBe(usd(25n * tokenCost(1000)));
    await expectNothingStarted();
  });

  it('--allow-over-budget starts them, and the guard decides each run', async () => {
    const fleet = await startWorkers(ctx, 1);
    const r = await fleet.runWhile(() =>
      runCli(['backfill', '--task', 'burst', '--from', FROM, '--to', TO, '--allow-over-budget', '--json'], ctx.env),
    );
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).summary).toMatchObject({ slots: 20, completed: 20 });
  });
});
