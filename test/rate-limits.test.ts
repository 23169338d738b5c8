import { randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import parsePrometheus from 'parse-prometheus-text-format';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { createOpenAIProvider } from '../src/models/openai-provider';
import { loadRateLimitsFile } from '../src/ratelimits/rate-limits-file';
import { applyRateLimits, rateLimitStatus, rateLimitWaits, type RateLimitWaits } from '../src/ratelimits/rate-limits-store';
import { scheduledRun } from '../src/workflows/scheduled-run';
import { appliedInput } from './support/applied';
import { startTestAdmin } from './support/admin-server';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { startFakeOpenAI, type FakeOpenAI } from './support/fake-openai';
import { startWorkers } from './support/workers';

// Provider rate limits shared by every worker: the limiter in PostgreSQL (rate_limit_acquire) against racing
// connections, and runs through real workers against the fake OpenAI server enforcing the same limit.

let ctx: TestContext;
let fake: FakeOpenAI;
/** The admin page's read-only role. */
let readonlyPool: pg.Pool;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  fake = await startFakeOpenAI();
  readonlyPool = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 1);
});

afterAll(async () => {
  await readonlyPool?.end();
  await fake?.close();
  await ctx?.close();
});

describe('the limiter in PostgreSQL', () => {
  it('100 calls racing on 10 connections: never more in any 2 s than the 6 s burst plus 2 s at the rate, and all admitted', async () => {
    // 600 requests a minute: one request costs 110 ms of capacity (66 s per minute's limit) and 6 s of burst is
    // allowed, so any window of W ms admits at most (6000 + W) / 110 requests.
    await applyRateLimits(ctx.operatorPool, [{ model: 'openai/gpt-4o-mini', requestsPerMinute: 600, tokensPerMinute: null }]);
    const clients = await Promise.all(
      Array.from({ length: 10 }, async () => {
        const c = new pg.Client({ connectionString: ctx.databaseUrl });
        c.on('error', () => undefined); // the server shutting down at the end of the run
        await c.connect();
        return c;
      }),
    );
    const admittedAtMs: number[] = [];
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    try {
      const racers = clients.map(async (c) => {
        await gate; // every connection is open before the first asks: the racers meet
        for (let call = 0; call < 10; call++) {
          for (;;) {
            const { rows } = await c.query<{ wait_us: string; at_us: string }>(
              `select rate_limit_acquire('openai/gpt-4o-mini', 1, 0) as wait_us, rate_limit_now_us() as at_us`,
            );
            if (rows[0].wait_us === '0') {
              admittedAtMs.push(Number(rows[0].at_us) / 1000); // whole microseconds since 1970: exact as a JS number
              break;
            }
            await new Promise((r) => setTimeout(r, Math.min(50, Number(rows[0].wait_us) / 1000)));
          }
        }
      });
      open();
      await Promise.all(racers);
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
    expect(admittedAtMs).toHaveLength(100);
    const busiest = busiestWindow(admittedAtMs, 2_000);
    const most = Math.floor((6_000 + 2_000) / 110);
    // + 1: the test reads the clock just after the limiter read its own, so one admission may look a little later
    expect(busiest).toBeLessThanOrEqual(most + 1);
    // the burst was used: the racers did meet at the start
    expect(busiest).toBeGreaterThan(50);
    const [status] = await rateLimitStatus(ctx.pool);
    expect(status).toMatchObject({ model: 'openai/gpt-4o-mini', admitted: '100' });
  });

  it("a provider's Retry-After holds the model for every worker until then", async () => {
    await applyRateLimits(ctx.operatorPool, [{ model: 'openai/gpt-4.1-nano', requestsPerMinute: 1000, tokensPerMinute: null }]);
    await ctx.pool.query(`select rate_limit_hold('openai/gpt-4.1-nano', 30000, true)`);
    const { rows } = await ctx.pool.query<{ wait_us: string }>(`select rate_limit_acquire('openai/gpt-4.1-nano', 1, 0) as wait_us`);
    expect(Number(rows[0].wait_us)).toBeGreaterThan(25_000_000);
    expect((await rateLimitStatus(ctx.pool)).find((s) => s.model === 'openai/gpt-4.1-nano')).toMatchObject({ throttled: '1' });
  });
});

/** The most of `times` (ms) within any window of `windowMs`. */
function busiestWindow(times: number[], windowMs: number): number {
  const sorted = [...times].sort((a, b) => a - b);
  let busiest = 0;
  for (let i = 0, j = 0; i < sorted.length; i++) {
    while (sorted[i] - sorted[j] >= windowMs) j++;
    busiest = Math.max(busiest, i - j + 1);
  }
  return busiest;
}

describe('runs through real workers against a provider that enforces its limit', () => {
  it('12 runs at once on 2 workers, 30 requests a minute: every run completes, the provider answers no 429', async () => {
    const model = 'openai/gpt-4o-mini';
    await applyRateLimits(ctx.operatorPool, [{ model, requestsPerMinute: 30, tokensPerMinute: 200_000 }]);
    fake.reset();
    fake.setRateLimit('gpt-4o-mini', { requestsPerMinute: 30, tokensPerMinute: 200_000 });
    const provider = createOpenAIProvider({ OPENAI_BASE_URL: fake.baseURL, OPENAI_API_KEY: 'sk-test-fake' });
    const taskQueue = `${ctx.taskQueue}-limits-${randomUUID().slice(0, 6)}`;
    const fleet = await startWorkers({ ...ctx, taskQueue }, 2, { provider });
    const results = await fleet.runWhile(async () => {
      const handles = await Promise.all(
        Array.from({ length: 12 }, async (_, i) =>
          ctx.client.workflow.start(scheduledRun, {
            workflowId: `cron-limits-${i}-${randomUUID().slice(0, 6)}-2026-11-02T09:00:00Z`,
            taskQueue,
            args: [
              await appliedInput(ctx.operatorPool, {
                taskId: `limits-${i}`,
                userId: 'u-limits',
                input: 'Summarise the day.',
                model,
                embeddingModel: 'openai/text-embedding-3-small',
                maxOutputTokens: 500,
              }),
            ],
          }),
        ),
      );
      return Promise.all(handles.map((h) => h.result()));
    });
    expect(results.map((r) => r.status)).toEqual(Array(12).fill('completed'));
    expect(fake.rateLimitedAnswers()).toBe(0);
    // What the provider saw: the chat requests spaced by the limiter, 3 at once (the 6 s burst at 2.2 s a request),
    // then one per 2.2 s. Any 4 s held at most (6 + 4) / 2.2 of them (+ 1 for the way to the provider).
    const chats = fake.billed.filter((b) => b.endpoint === 'chat').map((b) => b.receivedAt);
    expect(chats).toHaveLength(12);
    expect(busiestWindow(chats, 4_000)).toBeLessThanOrEqual(Math.floor(10 / 2.2) + 1);
    const status = (await rateLimitStatus(ctx.pool)).find((s) => s.model === model);
    expect(status).toMatchObject({ requestsPerMinute: 30, tokensPerMinute: 200_000, throttled: '0' });
    // 30 a minute with a 6 s burst admits 3 at once: the others waited for capacity, and it shows
    expect(Number(status?.waited)).toBeGreaterThanOrEqual(6);
    expect(Number(status?.waitedMs)).toBeGreaterThan(0);

    // and /metrics serves it, read as the admin page's read-only role
    const readonly = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 2);
    const admin = await startTestAdmin(ctx, readonly);
    try {
      const families = parsePrometheus(await (await fetch(`${admin.url}/metrics`)).text());
      const value = (name: string) => families.find((f) => f.name === name)?.metrics.find((m) => m.labels?.model === model)?.value;
      expect(value('cronledger_rate_limit_admitted_total')).toBe(status?.admitted);
      expect(value('cronledger_rate_limit_waited_total')).toBe(status?.waited);
      expect(Number(value('cronledger_rate_limit_wait_seconds_total'))).toBeGreaterThan(0);
      expect(value('cronledger_rate_limit_throttled_total')).toBe('0');

      // and the admin page's Models page shows the waits of the last 24 hours (UTC hours), the same as in all
      const { rateLimits } = (await (await fetch(`${admin.url}/api/models`)).json()) as { rateLimits: RateLimitWaits[] };
      const waits = rateLimits.find((r) => r.model === model);
      expect(waits).toMatchObject({
        requestsPerMinute: 30,
        tokensPerMinute: '200000',
        waitsLast24h: status?.waited,
        waitedMsLast24h: status?.waitedMs,
        throttledLast24h: '0',
        waited: status?.waited,
        waitedMs: status?.waitedMs,
      });
      expect(Number(waits?.waitsThisHour)).toBeLessThanOrEqual(Number(status?.waited));
      const page = await (await fetch(`${admin.url}/models`)).text();
      const row = new RegExp(`<tr data-model="${model}">[\\s\\S]*?</tr>`).exec(page)?.[0] ?? '';
      const ms = BigInt(status?.waitedMs ?? '0');
      expect(row).toContain(`>${status?.waited}</td>`);
      expect(row).toContain(`>${ms / 1000n}.${(ms % 1000n).toString().padStart(3, '0')} s</td>`);
    } finally {
      await admin.close();
      await readonly.end();
    }
  });
});

describe("a provider's 429 on a rate-limited model", () => {
  it('is retried after its Retry-After, counted, and holds the model for every worker meanwhile', async () => {
    const model = 'openai/gpt-4o-mini';
    await applyRateLimits(ctx.operatorPool, [{ model, requestsPerMinute: 10_000, tokensPerMinute: null }]);
    const before = (await rateLimitStatus(ctx.pool)).find((s) => s.model === model);
    const waitsOf = async () => (await rateLimitWaits(readonlyPool)).find((r) => r.model === model);
    const waitsBefore = await waitsOf();
    fake.reset();
    fake.script('chat', { kind: 'error', status: 429, retryAfter: '2' });
    const provider = createOpenAIProvider({ OPENAI_BASE_URL: fake.baseURL, OPENAI_API_KEY: 'sk-test-fake' });
    const taskQueue = `${ctx.taskQueue}-throttled-${randomUUID().slice(0, 6)}`;
    const fleet = await startWorkers({ ...ctx, taskQueue }, 1, { provider });
    const { result, heldUntilUs } = await fleet.runWhile(async () => {
      const handle = await ctx.client.workflow.start(scheduledRun, {
        workflowId: `cron-throttled-${randomUUID().slice(0, 6)}-2026-11-02T09:00:00Z`,
        taskQueue,
        args: [
          await appliedInput(ctx.operatorPool, {
            taskId: 'throttled',
            userId: 'u-limits',
            input: 'Summarise the day.',
            model,
            embeddingModel: 'openai/text-embedding-3-small',
          }),
        ],
      });
      const r = await handle.result();
      const { rows } = await ctx.pool.query<{ held: string }>(`select held_until_us as held from rate_limit_state where model = $1`, [
        model,
      ]);
      return { result: r, heldUntilUs: BigInt(rows[0].held) };
    });
    expect(result.status).toBe('completed');
    expect(heldUntilUs).toBeGreaterThan(0n);
    const chats = fake.requests.filter((r) => r.path === '/v1/chat/completions');
    expect(chats.map((r) => r.status)).toEqual([429, 200]);
    // the hold ran to the Retry-After, and the call that came after it was sent no sooner
    const answeredAt = fake.billed.find((b) => b.endpoint === 'chat')?.receivedAt ?? 0;
    expect(BigInt(answeredAt) * 1000n).toBeGreaterThanOrEqual(heldUntilUs - 1000n);
    const after = (await rateLimitStatus(ctx.pool)).find((s) => s.model === model);
    expect(Number(after?.throttled) - Number(before?.throttled ?? 0)).toBe(1);
    // the admin page's figures (read as its read-only role): the 429 counted in the last 24 hours and in all
    const waitsAfter = await waitsOf();
    expect(Number(waitsAfter?.throttledLast24h) - Number(waitsBefore?.throttledLast24h ?? 0)).toBe(1);
    expect(waitsAfter?.throttled).toBe(after?.throttled);
  });
});

describe('cronledger limits', () => {
  const file = (content: string): string => {
    const path = join(mkdtempSync(join(tmpdir(), 'cronledger-limits-')), 'limits.json');
    writeFileSync(path, content);
    return path;
  };
  const env = () => ({ ...process.env, DATABASE_URL: ctx.databaseUrl, DATABASE_OPERATOR_URL: ctx.operatorDatabaseUrl });

  it('applies a file as the whole set and lists it', async () => {
    const applied = await runCli(
      ['limits', 'apply', file('{"rateLimits": {"openai/gpt-4.1-nano": {"requestsPerMinute": 500, "tokensPerMinute": 200000}}}')],
      env(),
    );
    expect(applied.stderr).toBe('');
    expect(applied.stdout).toContain('limited  openai/gpt-4.1-nano 500 requests/min, 200000 tokens/min');
    expect(applied.stdout).toContain('removed  openai/gpt-4o-mini');
    const listed = await runCli(['limits', 'list', '--json'], env());
    expect(JSON.parse(listed.stdout)).toEqual([
      expect.objectContaining({ model: 'openai/gpt-4.1-nano', requestsPerMinute: 500, tokensPerMinute: 200000 }),
    ]);
  });

  it('refuses a bad file with a non-zero exit, naming the value and the fix', async () => {
    const r = await runCli(['limits', 'apply', file('{"rateLimits": {"openai/gpt-4o-mini": {"requestsPerMinute": 1.5}}}')], env());
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(
      /rateLimits."openai\/gpt-4o-mini".requestsPerMinute 1.5 is not a whole number from 1 to 1,000,000,000: write the provider's limit, e.g. 500/,
    );
  });

  it.each([
    ['not JSON', '{', /is not valid JSON/],
    ['no rateLimits section', '{"limits": {}}', /expected \{"rateLimits"/],
    ['a zero limit', '{"rateLimits": {"openai/gpt-4o-mini": {"tokensPerMinute": 0}}}', /tokensPerMinute 0 is not a whole number/],
    [
      'a limit as a string',
      '{"rateLimits": {"openai/gpt-4o-mini": {"requestsPerMinute": "500"}}}',
      /requestsPerMinute "500" is not a whole/,
    ],
    ['neither limit', '{"rateLimits": {"openai/gpt-4o-mini": {}}}', /give requestsPerMinute, tokensPerMinute or both/],
    ['an unknown field', '{"rateLimits": {"openai/gpt-4o-mini": {"rpm": 5}}}', /expected \{"requestsPerMinute"/],
    ['a model key without provider', '{"rateLimits": {"gpt-4o-mini": {"requestsPerMinute": 5}}}', /is not a model key/],
    ['a model never priced', '{"rateLimits": {"openai/gpt-9": {"requestsPerMinute": 5}}}', /no price was ever applied for openai\/gpt-9/],
  ])('refuses %s, naming the value and the fix, and changes nothing', async (_case, content, message) => {
    const before = await rateLimitStatus(ctx.pool);
    await expect((async () => applyRateLimits(ctx.operatorPool, loadRateLimitsFile(file(content))))()).rejects.toThrow(message);
    expect(await rateLimitStatus(ctx.pool)).toEqual(before);
  });
});
