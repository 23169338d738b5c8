import { WorkflowFailedError } from '@temporalio/client';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { Webhook as Verifier } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { budgetStatus } from '../src/budgets/budget-status';
import { applyBudgets } from '../src/budgets/budgets-store';
import { releaseReservations, reserveBudget, sweepAllExpired } from '../src/budgets/reserve';
import { BUDGET_SWEEP_SCHEDULE_ID } from '../src/constants';
import { ensureBudgetSweepSchedule } from '../src/schedules/budget-sweep-schedule';
import { worstCaseOf } from '../src/budgets/worst-case';
import { applyPrices, loadPricesFile, priceInForce } from '../src/ledger/prices';
import { fullUsage } from '../src/models/provider';
import { formatScaled, LEDGER_SCALE, parseUsd, toAttoUsd } from '../src/money';
import { scheduledRun } from '../src/workflows/scheduled-run';
import { appliedInput, type TestRun } from './support/applied';
import { bookExactSpend } from './support/budget-spend';
import { waitFor } from './support/wait';
import { startFakeOpenAI } from './support/fake-openai';
import { createTestContext, type TestContext } from './support/context';
import { openReservationOfOneRun } from './support/open-reservation';
import { oracleCost } from './support/cost-oracle';
import { startWorkers, workflowBundlePath } from './support/workers';
import { startWorkerProcesses, stopWorkerProcesses } from './support/worker-processes';

/**
 * The budget guard end to end: real Temporal, real PostgreSQL, the mock model. Each test uses its own user, and its
 * own month (runs decide by the database's clock, so budgets take effect from the start of the current month).
 */

let ctx: TestContext;
const PROMPT = 'Summarise the day.';
const MAX_OUTPUT = 1000;
// The mock reports a reply of the full cap and an embedding of as many tokens: actual cost = the worst case, so a
// guard that admitted one run too many would settle over the limit.
const SIMULATE = { promptTokens: 50, completionTokens: MAX_OUTPUT, embeddingTokens: MAX_OUTPUT };

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await applyBudgets(ctx.operatorPool, { budgets: [], downgrade: { 'openai/gpt-4o-mini': 'openai/gpt-4.1-nano' } }, 'test');
});

afterAll(async () => {
  await ctx?.close();
});

const monthStart = async (): Promise<Date> =>
  (await ctx.pool.query<{ m: Date }>(`select date_trunc('month', now() at time zone 'UTC') at time zone 'UTC' as m`)).rows[0].m;

/** The worst case of one run (chat + embedding) on the given chat model, in atto-USD: the guard's own definition. */
/** A run's worst case in USD; `simulated: false` for a run on a provider that is not the mock, which gets no profile. */
async function worstCase(model: string, opts: { simulated: boolean } = { simulated: true }): Promise<bigint> {
  const now = new Date();
  const w = worstCaseOf({ prompt: PROMPT, maxOutputTokens: MAX_OUTPUT, simulate: opts.simulated ? SIMULATE : undefined });
  const chat = oracleCost('chat', w.chat, await priceInForce(ctx.pool, model, now));
  const embed = oracleCost('embedding', w.embedding, await priceInForce(ctx.pool, 'openai/text-embedding-3-small', now));
  return chat + embed;
}
const usd = (a: bigint): string => formatScaled(a, LEDGER_SCALE);

/** Gives the user a limit from the start of this month and books `spent` of it (a free call plus an exact adjustment). */
async function budgetWithSpend(userId: string, limit: bigint, spent: bigint): Promise<void> {
  await applyBudgets(
    ctx.operatorPool,
    { budgets: [{ userId, monthlyLimitUsd: usd(limit), timeZone: 'UTC', effectiveFrom: await monthStart() }] },
    'test',
  );
  if (spent > 0n) await bookExactSpend(ctx.ownerPool, `seed-${userId}`, userId, usd(spent));
}

const input = (userId: string): TestRun => ({
  taskId: `guard-${userId}`,
  userId,
  input: PROMPT,
  model: 'openai/gpt-4o-mini',
  embeddingModel: 'openai/text-embedding-3-small',
  maxOutputTokens: MAX_OUTPUT,
  simulate: SIMULATE,
});

let slots = 0;
const startRun = async (userId: string, taskQueue = ctx.taskQueue) => {
  const minute = new Date(Date.UTC(2026, 0, 1, 0, slots++)).toISOString().slice(0, 19) + 'Z';
  return ctx.client.workflow.start(scheduledRun, {
    workflowId: `cron-guard-${userId}-${minute}`,
    taskQueue,
    args: [await appliedInput(ctx.operatorPool, input(userId))],
  });
};

const ledgerOf = async (userId: string) =>
  (
    await ctx.pool.query<{ model: string; cost_usd: string; idempotency_key: string }>(
      `select model, cost_usd, idempotency_key from usage_ledger where user_id = $1 and entry_type = 'usage' and idempotency_key not like 'seed-%' order by id`,
      [userId],
    )
  ).rows;
const openReservations = async (userId: string) =>
  Number(
    (await ctx.pool.query(`select count(*) as n from budget_reservations where user_id = $1 and status = 'open'`, [userId])).rows[0].n,
  );

describe('tiers', () => {
  it('under 80 %: default models; every reservation settled by its booking, never below the actual cost', async () => {
    const user = `tier-default-${randomUUID().slice(0, 6)}`;
    const w = await worstCase('openai/gpt-4o-mini');
    await budgetWithSpend(user, w * 100n, 0n);
    const fleet = await startWorkers(ctx, 1);
    const result = await fleet.runWhile(async () => (await startRun(user)).result());
    expect(result).toMatchObject({ status: 'completed', tier: 'default' });
    const rows = await ledgerOf(user);
    expect(rows.map((r) => r.model)).toEqual(['openai/gpt-4o-mini', 'openai/text-embedding-3-small']);
    const settled = await ctx.pool.query(
      `select r.amount_usd, l.cost_usd, r.amount_usd >= l.cost_usd as covers from budget_reservations r join usage_ledger l on l.id = r.settled_entry_id where r.user_id = $1`,
      [user],
    );
    expect(settled.rows).toHaveLength(2);
    expect(settled.rows.every((r) => r.covers)).toBe(true);
    expect(await openReservations(user)).toBe(0);
  });

  it('from 80 %: the run is downgraded, books under the cheap model, and records its tier (also as the Tier search attribute)', async () => {
    const user = `tier-cheap-${randomUUID().slice(0, 6)}`;
    const w = await worstCase('openai/gpt-4o-mini');
    await budgetWithSpend(user, w * 100n, w * 80n); // exactly 80 %
    const fleet = await startWorkers(ctx, 1);
    const handle = await startRun(user);
    const result = await fleet.runWhile(() => handle.result());
    expect(result).toMatchObject({ status: 'completed', tier: 'cheap' });
    expect((await ledgerOf(user)).map((r) => r.model)).toEqual(['openai/gpt-4.1-nano', 'openai/text-embedding-3-small']);
    const run = await ctx.pool.query('select status, tier from runs where user_id = $1', [user]);
    expect(run.rows).toEqual([{ status: 'completed', tier: 'cheap' }]);
    const described = await handle.describe();
    expect(described.searchAttributes.Tier).toEqual(['cheap']);
  });

  it('when even the cheap worst case would cross the limit: blocked, no model call, closed Completed with the reason', async () => {
    const user = `tier-blocked-${randomUUID().slice(0, 6)}`;
    const cheap = await worstCase('openai/gpt-4.1-nano');
    await budgetWithSpend(user, cheap * 100n, cheap * 100n - cheap + 1n); // 1 atto-USD short of room for one run
    const fleet = await startWorkers(ctx, 1);
    const handle = await startRun(user);
    const result = await fleet.runWhile(() => handle.result());
    expect(result).toMatchObject({
      status: 'blocked',
      tier: 'blocked',
      budget: { limitUsd: usd(cheap * 100n), spentUsd: usd(cheap * 99n + 1n), reservedUsd: usd(0n) },
    });
    expect((await handle.describe()).status.name).toBe('COMPLETED');
    expect(await ledgerOf(user)).toEqual([]);
    const run = await ctx.pool.query('select status, tier, budget from runs where user_id = $1', [user]);
    expect(run.rows[0]).toMatchObject({ status: 'blocked', tier: 'blocked', budget: { limitUsd: usd(cheap * 100n) } });

    // Raising the limit mid-month unblocks the next run; lowering it below what is spent blocks again.
    await applyBudgets(ctx.operatorPool, { budgets: [{ userId: user, monthlyLimitUsd: usd(cheap * 1000n), timeZone: 'UTC' }] }, 'test');
    const raised = await fleet2(() => startRun(user).then((h) => h.result()));
    expect(raised).toMatchObject({ status: 'completed', tier: 'default' });
    await applyBudgets(ctx.operatorPool, { budgets: [{ userId: user, monthlyLimitUsd: usd(cheap * 50n), timeZone: 'UTC' }] }, 'test');
    const lowered = await fleet2(() => startRun(user).then((h) => h.result()));
    expect(lowered).toMatchObject({ status: 'blocked' });
  });

  it('budget exhausted before a call made again (after a billed failure): the run ends blocked, the billed call stays booked', async () => {
    const user = `tier-blocked-again-${randomUUID().slice(0, 6)}`;
    const w = await worstCase('openai/gpt-4o-mini');
    // Room for exactly one run at its worst case: the billed chat call 1 uses its share, so call 2 would cross the limit.
    await budgetWithSpend(user, w, 0n);
    const fleet = await startWorkers(ctx, 1);
    const handle = await ctx.client.workflow.start(scheduledRun, {
      workflowId: `cron-guard-${user}-2026-01-02T00:00:00Z`,
      taskQueue: ctx.taskQueue,
      args: [await appliedInput(ctx.operatorPool, { ...input(user), simulate: { ...SIMULATE, failFirstAttempts: 1 } })],
    });
    const result = await fleet.runWhile(() => handle.result());
    expect(result).toMatchObject({ status: 'blocked', tier: 'blocked', budget: { limitUsd: usd(w), blockedBefore: 'chat call 2' } });
    expect((await handle.describe()).status.name).toBe('COMPLETED');
    const rows = await ctx.pool.query<{ idempotency_key: string; status: string }>(
      `select idempotency_key, status from usage_ledger where user_id = $1 and entry_type = 'usage' order by id`,
      [user],
    );
    expect(rows.rows.map((r) => [r.idempotency_key.split(':').slice(1).join(':'), r.status])).toEqual([['chat:1', 'failed']]);
    const run = await ctx.pool.query('select status, tier, budget from runs where user_id = $1', [user]);
    expect(run.rows[0]).toMatchObject({ status: 'blocked', tier: 'blocked', budget: { blockedBefore: 'chat call 2' } });
    expect(await openReservations(user)).toBe(0); // the embedding's share went back
    const [status] = await budgetStatus(ctx.pool, { userId: user });
    expect((await ctx.pool.query('select $1::numeric <= $2::numeric as within', [status.spentUsd, usd(w)])).rows[0].within).toBe(true);
  });
});

const fleet2 = async <T>(fn: () => Promise<T>): Promise<T> => (await startWorkers(ctx, 1)).runWhile(fn);

describe("a run that does not fit only because of another run's open reservation", () => {
  it('waits for it to settle, then runs as it would have alone', async () => {
    const user = `waits-${randomUUID().slice(0, 6)}`;
    const w = await worstCase('openai/gpt-4o-mini');
    await budgetWithSpend(user, (w * 3n) / 2n, 0n); // room for one run's worst case, not for two
    // Another run's reservation of its worst case, open: with it, this run would be blocked (or downgraded).
    const other = await openReservationOfOneRun(ctx.pool, user, `other-${user}`, {
      prompt: PROMPT,
      maxOutputTokens: MAX_OUTPUT,
      simulate: SIMULATE,
    });
    expect(other).toMatchObject({ tier: 'default', worstCaseUsd: usd(w) });
    const fleet = await startWorkers(ctx, 1);
    const result = await fleet.runWhile(async () => {
      const handle = await startRun(user);
      // The run claimed its slot and keeps deciding again: nothing reserved, no model call, still running.
      await waitFor(
        async () => (await ctx.pool.query(`select 1 from runs where user_id = $1 and status = 'running'`, [user])).rowCount === 1,
        60_000,
        'the run claimed',
      );
      await new Promise((r) => setTimeout(r, 3000));
      expect((await handle.describe()).status.name).toBe('RUNNING');
      expect(await openReservations(user)).toBe(2); // the other run's only
      expect(await ledgerOf(user)).toEqual([]);
      await releaseReservations(ctx.pool, `other-${user}`);
      return handle.result();
    });
    expect(result).toMatchObject({ status: 'completed', tier: 'default' });
    expect((await ledgerOf(user)).map((r) => r.model)).toEqual(['openai/gpt-4o-mini', 'openai/text-embedding-3-small']);
  });
});

describe('a burst of 20 slots of one task started at once', () => {
  it('ends as the same runs one by one would: 4 default, 1 cheap, 15 blocked, and the limit never exceeded', async () => {
    // A new user's first try: $0.002 a month, a downgrade map to gpt-4.1-nano, and a task whose runs reserve 1,024
    // output tokens but use 240 (1,200 prompt and 400 embedding tokens). One by one, four runs fit at the default
    // model, a fifth only at the cheap one, and the rest are blocked. Started together, each run's worst case meets the
    // others' open reservations; a run that doesn't fit only because of them waits for them to settle.
    const user = `burst-${randomUUID().slice(0, 6)}`;
    const limit = toAttoUsd(parseUsd('0.002'));
    await budgetWithSpend(user, limit, 0n);
    const simulate = { promptTokens: 1200, completionTokens: 240, embeddingTokens: 400 };
    const task: TestRun = { ...input(user), taskId: `burst-${user}`, maxOutputTokens: 1024, simulate };
    const fleet = await startWorkers(ctx, 1);
    const results = await fleet.runWhile(async () => {
      const started = await Promise.all(
        Array.from({ length: 20 }, async (_, i) =>
          ctx.client.workflow.start(scheduledRun, {
            workflowId: `cron-burst-${user}-2026-01-02T09:${String(i).padStart(2, '0')}:00Z`,
            taskQueue: ctx.taskQueue,
            args: [await appliedInput(ctx.operatorPool, task)],
          }),
        ),
      );
      return Promise.all(started.map((h) => h.result()));
    });
    const count = (status: string, tier?: string) =>
      results.filter((r) => r.status === status && (tier === undefined || r.tier === tier)).length;
    expect([count('completed', 'default'), count('completed', 'cheap'), count('blocked')]).toEqual([4, 1, 15]);

    const now = new Date();
    const embedding = await priceInForce(ctx.pool, 'openai/text-embedding-3-small', now);
    const runCost = async (model: string) =>
      oracleCost(
        'chat',
        fullUsage({ promptTokens: 1200, cachedPromptTokens: 0, completionTokens: 240, reasoningTokens: 0 }),
        await priceInForce(ctx.pool, model, now),
      ) +
      oracleCost('embedding', fullUsage({ promptTokens: 400, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 }), embedding);
    const expected = 4n * (await runCost('openai/gpt-4o-mini')) + (await runCost('openai/gpt-4.1-nano'));
    const total = (await ctx.pool.query(`select sum(cost_usd) as s from usage_ledger where user_id = $1`, [user])).rows[0].s as string;
    expect(toAttoUsd(parseUsd(total))).toBe(expected);
    expect(expected).toBeLessThanOrEqual(limit);
    expect(await openReservations(user)).toBe(0);
  });
});

describe('50 runs racing at 95 % of the limit, on 3 worker processes', () => {
  it('never settle over the limit, and complete at least as many runs as the remaining budget allows at their worst case', async () => {
    const user = `race-${randomUUID().slice(0, 6)}`;
    const cheap = await worstCase('openai/gpt-4.1-nano');
    // Room for exactly 10 cheap worst cases (and a half): limit 210 W, spent 199.5 W = 95 %.
    const limit = cheap * 210n;
    const spent = (cheap * 1995n) / 10n;
    await budgetWithSpend(user, limit, spent);
    const room = (limit - spent) / cheap;
    expect(room).toBe(10n);

    const dir = mkdtempSync(join(tmpdir(), 'cronledger-budget-race-'));
    const appName = `race-${user}`;
    const workers = await startWorkerProcesses(3, {
      target: {
        temporalAddress: ctx.temporalAddress,
        namespace: ctx.namespace,
        taskQueue: `${ctx.taskQueue}-race`,
        databaseUrl: ctx.databaseUrl,
      },
      bundlePath: await workflowBundlePath(dir),
      logDir: dir,
      // each process's connections carry its own application_name, so the barrier sees which processes wait
      env: (incarnation) => ({ PGAPPNAME: `${appName}-${incarnation}` }),
    });
    const barrier = new pg.Client({ connectionString: ctx.ownerDatabaseUrl }); // FOR UPDATE: only the owner may lock the row directly
    await barrier.connect();
    try {
      // The barrier: hold the user's month row, so every decision queues on its lock; release once the three
      // worker processes all have decisions waiting there, so the racers meet.
      // (the spend booked above made the row)
      await barrier.query('begin');
      await barrier.query(`select 1 from budget_months where user_id = $1 for update`, [user]);
      const handles = await Promise.all(Array.from({ length: 50 }, () => startRun(user, `${ctx.taskQueue}-race`)));
      const deadline = Date.now() + 120_000;
      for (;;) {
        const { rows } = await ctx.pool.query(
          `select count(distinct application_name)::int as n from pg_stat_activity
            where wait_event_type = 'Lock' and application_name like $1 and datname = current_database()`,
          [`${appName}-%`],
        );
        if (rows[0].n === 3) break;
        if (Date.now() > deadline) throw new Error(`the racers never met at the barrier: ${JSON.stringify(rows[0])}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      await barrier.query('commit');
      const results = await Promise.all(handles.map((h) => h.result()));
      const completed = results.filter((r) => r.status === 'completed').length;
      const blocked = results.filter((r) => r.status === 'blocked').length;
      expect(completed + blocked).toBe(50);
      expect(BigInt(completed)).toBeGreaterThanOrEqual(room);
      expect(blocked).toBeGreaterThan(0);
      const total = (await ctx.pool.query(`select sum(cost_usd) as s from usage_ledger where user_id = $1`, [user])).rows[0].s as string;
      expect(toAttoUsd(parseUsd(total))).toBeLessThanOrEqual(limit);
      // the runs cost their worst case, so the completed ones used all the room there was
      expect(toAttoUsd(parseUsd(total))).toBe(spent + BigInt(completed) * cheap);
      expect(await openReservations(user)).toBe(0);
      // each worker process made decisions
      const deciders = await ctx.pool.query(`select count(distinct claimed_by)::int as n from runs where user_id = $1`, [user]);
      expect(deciders.rows[0].n).toBe(3);
    } finally {
      await barrier.end();
      await stopWorkerProcesses(workers);
    }
  });
});

/** The budget webhook's signing secret (whsec_ and base64), as BUDGET_WEBHOOK_SECRET holds it. */
const SECRET = `whsec_${randomBytes(32).toString('base64')}`;

describe('threshold events', () => {
  it('crossing 80 % and 100 % records one event each per month, delivered with the same event ID through a webhook failing twice first', async () => {
    const user = `events-${randomUUID().slice(0, 6)}`;
    const w = await worstCase('openai/gpt-4o-mini');
    const cheap = await worstCase('openai/gpt-4.1-nano');
    await budgetWithSpend(user, w * 100n, w * 80n);
    const posts: { status: number; body: { eventId: string; threshold: number }; id: string; verified: unknown }[] = [];
    let failures = 0;
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString('utf8')));
      req.on('end', () => {
        const status = failures < 2 ? 503 : 200;
        if (status === 503) failures++;
        // The receiver's Standard Webhooks library checks each delivery's signature
        const verified = (() => {
          try {
            return new Verifier(SECRET).verify(body, req.headers as Record<string, string>);
          } catch (err) {
            return String(err);
          }
        })();
        posts.push({ status, body: JSON.parse(body), id: String(req.headers['webhook-id']), verified });
        // An error page that echoes the path, as many do: it must not reach last_error
        res.writeHead(status).end(status === 503 ? `unavailable: ${req.url}` : '');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook/secret-path`;
    try {
      const fleet = await startWorkers(ctx, 1, { budgetWebhookUrl: url, budgetWebhookSecret: SECRET });
      await fleet.runWhile(async () => {
        expect(await (await startRun(user)).result()).toMatchObject({ tier: 'cheap' });
        expect(await (await startRun(user)).result()).toMatchObject({ tier: 'cheap' }); // same month: no second event
      });
      const eventId = `budget:${user}:UTC:${(await budgetStatus(ctx.pool, { userId: user }))[0].month}:80`;
      expect(posts.map((p) => [p.status, p.body.eventId])).toEqual([
        [503, eventId],
        [503, eventId],
        [200, eventId],
      ]);
      // Signed, and under one webhook-id on every redelivery of the event: the receiver dedupes on it.
      expect(posts.map((p) => p.verified)).toEqual(posts.map((p) => p.body));
      expect(new Set(posts.map((p) => p.id)).size).toBe(1);
      const events = await ctx.pool.query(
        'select event_id, threshold, attempts, delivered_at is not null as delivered from budget_events where user_id = $1',
        [user],
      );
      expect(events.rows).toEqual([{ event_id: eventId, threshold: 80, attempts: 3, delivered: true }]);
      const lastError = (await ctx.pool.query('select last_error from budget_events where event_id = $1', [eventId])).rows[0]
        .last_error as string;
      expect(lastError).toMatch(/answered 503 Service Unavailable$/);
      expect(lastError).not.toContain('secret-path'); // a webhook's path is its secret

      // Lower the limit below what is spent: the next run is blocked, and 100 % is recorded and delivered once.
      await applyBudgets(ctx.operatorPool, { budgets: [{ userId: user, monthlyLimitUsd: usd(cheap), timeZone: 'UTC' }] }, 'test');
      await (
        await startWorkers(ctx, 1, { budgetWebhookUrl: url, budgetWebhookSecret: SECRET })
      ).runWhile(async () => {
        expect(await (await startRun(user)).result()).toMatchObject({ status: 'blocked' });
        expect(await (await startRun(user)).result()).toMatchObject({ status: 'blocked' });
      });
      const hundred = posts.filter((p) => p.body.threshold === 100);
      expect(hundred.map((p) => p.status)).toEqual([200]);
      const count = await ctx.pool.query('select threshold from budget_events where user_id = $1 order by threshold', [user]);
      expect(count.rows.map((r) => r.threshold)).toEqual([80, 100]);
    } finally {
      server.close();
    }
  });
});

/**
 * Starts a run of `user` on a worker process whose chat call never answers, SIGKILLs that worker mid-call, then
 * terminates the run (as a timeout would): no workflow code runs again to release, so its two reservations stay open
 * until their expiry (`expirySeconds`) passes.
 */
async function runKilledMidCall(user: string, expirySeconds: number): Promise<void> {
  const fake = await startFakeOpenAI();
  fake.setLatency(120_000); // the model thinks for longer than the test waits
  const dir = mkdtempSync(join(tmpdir(), 'cronledger-budget-kill-'));
  const taskQueue = `${ctx.taskQueue}-kill-${user}`;
  const [worker] = await startWorkerProcesses(1, {
    target: { temporalAddress: ctx.temporalAddress, namespace: ctx.namespace, taskQueue, databaseUrl: ctx.databaseUrl },
    bundlePath: await workflowBundlePath(dir),
    logDir: dir,
    env: () => ({
      MODEL_PROVIDER: 'openai',
      OPENAI_API_KEY: 'sk-fake',
      OPENAI_BASE_URL: fake.baseURL,
      CRONLEDGER_RESERVATION_EXPIRY_SECONDS: String(expirySeconds),
    }),
  });
  try {
    const handle = await startRun(user, taskQueue);
    await waitFor(async () => [...fake.inFlight().values()].reduce((a, b) => a + b, 0) > 0, 60_000, 'the chat call reaching the provider');
    await worker.kill();
    await handle.terminate('the run is abandoned: no workflow code runs again to release');
  } finally {
    await worker.stop().catch(() => undefined);
    await fake.close();
  }
}

/** Until every reservation of the user is past its expiry, by the database's clock (the one the guard reads). */
const waitForExpiry = (user: string) =>
  waitFor(
    async () =>
      (await ctx.pool.query(`select bool_and(expires_at <= now()) as over from budget_reservations where user_id = $1`, [user])).rows[0]
        .over === true,
    60_000,
    `the reservations of ${user} expiring`,
  );

const reservationStatuses = async (user: string) =>
  (await ctx.pool.query(`select status, count(*)::int as n from budget_reservations where user_id = $1 group by 1 order by 1`, [user]))
    .rows;

describe('a worker SIGKILLed mid-call', () => {
  it('leaves a reservation that counts until its expiry and not after it, for the next decision too; the sweep closes it', async () => {
    const user = `killed-${randomUUID().slice(0, 6)}`;
    // the killed worker calls the fake OpenAI: not the mock, so the task's simulate profile is not passed (nor reserved for)
    const w = await worstCase('openai/gpt-4o-mini', { simulated: false });
    await budgetWithSpend(user, w * 100n, 0n);
    await runKilledMidCall(user, 8);
    expect(await openReservations(user)).toBe(2); // chat and embedding, reserved together
    expect((await budgetStatus(ctx.pool, { userId: user }))[0].reservedUsd).toBe(usd(w));
    await waitForExpiry(user);
    // expired: no longer counted, though nothing has closed it yet
    expect((await budgetStatus(ctx.pool, { userId: user }))[0].reservedUsd).toBe(usd(0n));
    expect(await openReservations(user)).toBe(2);
    const probe = await reserveBudget(ctx.pool, {
      userId: user,
      runId: `probe-${user}`,
      workflowId: 'probe',
      mayDowngrade: true,
      expirySeconds: 60,
      calls: [
        {
          step: 'chat',
          attempt: 1,
          kind: 'chat',
          model: 'openai/gpt-4o-mini',
          worstCase: worstCaseOf({ prompt: PROMPT, maxOutputTokens: MAX_OUTPUT }).chat,
        },
      ],
    });
    expect(probe.tier).toBe('default');
    expect(probe.reservedUsd).toBe(usd(0n));
    await releaseReservations(ctx.pool, `probe-${user}`);
    // the decision left the expired two open (it does not close them); the sweep does
    expect(await reservationStatuses(user)).toEqual([
      { status: 'open', n: 2 },
      { status: 'released', n: 1 },
    ]);
    expect(await sweepAllExpired(ctx.pool)).toBeGreaterThanOrEqual(2);
    expect(await openReservations(user)).toBe(0);
    expect(await reservationStatuses(user)).toEqual([
      { status: 'expired', n: 2 },
      { status: 'released', n: 1 },
    ]);
  });

  it('leaves a reservation that the budget-sweep schedule releases after its expiry, with no other run of the user', async () => {
    const user = `swept-${randomUUID().slice(0, 6)}`;
    await budgetWithSpend(user, (await worstCase('openai/gpt-4o-mini')) * 100n, 0n);
    await runKilledMidCall(user, 8);
    expect(await openReservations(user)).toBe(2);
    await waitForExpiry(user);
    expect(await openReservations(user)).toBe(2); // expired, but nothing has closed them yet
    await ensureBudgetSweepSchedule(ctx.client, { taskQueue: ctx.taskQueue });
    try {
      await fleet2(async () => {
        await ctx.client.schedule.getHandle(BUDGET_SWEEP_SCHEDULE_ID).trigger();
        await waitFor(async () => (await openReservations(user)) === 0, 60_000, 'the sweeper closing the reservations');
      });
      // only the killed run's two reservations ever existed: no decision swept them, the sweeper did
      expect(await reservationStatuses(user)).toEqual([{ status: 'expired', n: 2 }]);
      expect(await ledgerOf(user)).toEqual([]);
    } finally {
      await ctx.client.schedule.getHandle(BUDGET_SWEEP_SCHEDULE_ID).delete();
    }
  });
});

describe('the budget sweeper and threshold events', () => {
  it('delivers later, under the same event ID, an event whose webhook refused it when the run delivered it', async () => {
    const user = `resend-${randomUUID().slice(0, 6)}`;
    const w = await worstCase('openai/gpt-4o-mini');
    await budgetWithSpend(user, w * 100n, w * 80n);
    const posts: { status: number; eventId: string }[] = [];
    let answer = 400; // refused: the run's delivery gives up at once (a 4xx is not retried)
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString('utf8')));
      req.on('end', () => {
        posts.push({ status: answer, eventId: (JSON.parse(body) as { eventId: string }).eventId });
        res.writeHead(answer).end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
    const deps = { budgetWebhookUrl: url, budgetWebhookSecret: SECRET, budgetEventRetrySeconds: 0 };
    try {
      await (
        await startWorkers(ctx, 1, deps)
      ).runWhile(async () => {
        expect(await (await startRun(user)).result()).toMatchObject({ tier: 'cheap' });
      });
      const eventId = `budget:${user}:UTC:${(await budgetStatus(ctx.pool, { userId: user }))[0].month}:80`;
      const mine = () => posts.filter((p) => p.eventId === eventId);
      expect(mine()).toEqual([{ status: 400, eventId }]);
      const event = async () =>
        (await ctx.pool.query('select attempts, delivered_at is not null as delivered from budget_events where event_id = $1', [eventId]))
          .rows[0];
      expect(await event()).toEqual({ attempts: 1, delivered: false });

      answer = 200;
      await ensureBudgetSweepSchedule(ctx.client, { taskQueue: ctx.taskQueue });
      try {
        await (
          await startWorkers(ctx, 1, deps)
        ).runWhile(async () => {
          await ctx.client.schedule.getHandle(BUDGET_SWEEP_SCHEDULE_ID).trigger();
          await waitFor(async () => (await event()).delivered === true, 60_000, 'the sweeper delivering the event');
        });
      } finally {
        await ctx.client.schedule.getHandle(BUDGET_SWEEP_SCHEDULE_ID).delete();
      }
      expect(mine()).toEqual([
        { status: 400, eventId },
        { status: 200, eventId },
      ]);
      expect(await event()).toEqual({ attempts: 2, delivered: true });
    } finally {
      server.close();
    }
  });
});

// A task whose model has no price in force, for a user with a budget: the guard cannot reserve for it, and retrying will
// not price it. The run fails at once, recorded on its claim with the model and the fix, and no call is made: the
// decision's local activity does not retry an error no retry can cure, which would keep the run open for good with no
// claim row for its slot.
it('an unpriced model under a budget: the run fails for good, naming the model and `cronledger prices apply`', async () => {
  const user = `unpriced-${randomUUID().slice(0, 6)}`;
  await applyBudgets(
    ctx.operatorPool,
    { budgets: [{ userId: user, monthlyLimitUsd: '10', timeZone: 'UTC', effectiveFrom: await monthStart() }] },
    'test',
  );
  const fleet = await startWorkers(ctx, 1);
  const outcome = await fleet.runWhile(async () => {
    const handle = await ctx.client.workflow.start(scheduledRun, {
      workflowId: `cron-unpriced-${user}-2026-01-01T00:00:00Z`,
      taskQueue: ctx.taskQueue,
      args: [
        await appliedInput(ctx.operatorPool, {
          taskId: `task-${user}`,
          userId: user,
          input: 'Summarise the day.',
          model: 'acme/unpriced-model',
          embeddingModel: 'openai/text-embedding-3-small',
        }),
      ],
    });
    return handle.result().then(
      () => 'completed',
      (err: unknown) => err,
    );
  });
  expect(outcome).toBeInstanceOf(WorkflowFailedError);
  const runs = await ctx.pool.query<{ status: string; error: string }>('select status, error from runs where user_id = $1', [user]);
  expect(runs.rows).toHaveLength(1);
  expect(runs.rows[0].status).toBe('failed');
  expect(runs.rows[0].error).toContain('"acme/unpriced-model"');
  expect(runs.rows[0].error).toContain('cronledger prices apply');
  const spent = await ctx.pool.query(
    'select 1 from usage_ledger where user_id = $1 union all select 1 from budget_reservations where user_id = $1',
    [user],
  );
  expect(spent.rowCount).toBe(0);
});
