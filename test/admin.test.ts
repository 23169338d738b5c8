import { startTestAdmin } from './support/admin-server';
import { spawn } from 'node:child_process';
import { request } from 'node:http';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import parsePrometheus from 'parse-prometheus-text-format';
import pg from 'pg';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { Overview } from '../src/admin/admin-data';
import { startAdminServer, type RunningAdmin } from '../src/admin/server';
import { repoRoot } from '../src/config';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { recordUsage } from '../src/ledger/record-usage';
import { refreshRollups } from '../src/reports/rollups-write';
import type { UsageReport } from '../src/reports/types';
import { scheduledRun } from '../src/workflows/scheduled-run';
import { appliedInput, type TestRun } from './support/applied';
import { chatBooking } from './support/bookings';
import { runCli } from './support/cli';
import { launchChromium } from './support/chromium';
import { createTestContext, type TestContext } from './support/context';
import { atto, seedMonth } from './support/report-fixtures';
import { startWorkers } from './support/workers';
import { fullUsage } from '../src/models/provider';

/**
 * The admin page over a seeded ledger, served as in production (SELECT-only role, read-only sessions) and driven by
 * Debian's Chromium through playwright-core. Screenshots land in $CRONLEDGER_TEST_ARTIFACTS (default: a temp dir).
 */

const MONTH = '2026-06';
const ANOMALY_MONTH = '2026-07';
// As long as a user ID may be (200 characters, the rule in src/ledger/user-id.ts), so its page is served.
const HOSTILE = `<script>window.__pwned = 1</script>"'><img src=x onerror="window.__pwned=2">`.padEnd(200, 'long-');
const artifacts = process.env.CRONLEDGER_TEST_ARTIFACTS ?? mkdtempSync(join(tmpdir(), 'cronledger-admin-artifacts-'));
mkdirSync(artifacts, { recursive: true });

let ctx: TestContext;
let readonly: pg.Pool;
let admin: RunningAdmin;
let browser: BrowserContext;
/** The same browser ignoring the CSP: a request to another origin then reaches the route check instead of being blocked. */
let withoutCsp: BrowserContext;
let profile: string;
let profileWithoutCsp: string;
let realRun: { workflowId: string; runId: string };

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await seedMonth(ctx.ownerPool, { month: MONTH, users: 6, callsPerUser: 8 });
  await seedHostileUser();
  await seedAnomaly();

  // One real run through a worker: its ledger rows carry the workflow ID, and the Web UI knows the workflow.
  const fleet = await startWorkers(ctx, 1);
  realRun = await fleet.runWhile(async () => {
    const input: TestRun = {
      taskId: 'admin-real',
      userId: 'user-real',
      input: 'Summarise the overnight alerts.',
      model: 'openai/gpt-4o-mini',
      embeddingModel: 'openai/text-embedding-3-small',
    };
    const handle = await ctx.client.workflow.start(scheduledRun, {
      args: [await appliedInput(ctx.operatorPool, input)],
      workflowId: 'cron-admin-real-2026-06-20T09:00:00Z',
      taskQueue: ctx.taskQueue,
    });
    await handle.result();
    return { workflowId: handle.workflowId, runId: handle.firstExecutionRunId };
  });

  readonly = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 4);
  admin = await startTestAdmin(ctx, readonly);
  profile = mkdtempSync(join(tmpdir(), 'cronledger-admin-chromium-'));
  browser = await launchChromium(profile, { width: 1280, height: 900 });
  profileWithoutCsp = mkdtempSync(join(tmpdir(), 'cronledger-admin-chromium-'));
  withoutCsp = await launchChromium(profileWithoutCsp, { width: 1280, height: 900 }, { bypassCSP: true });
});

afterAll(async () => {
  await browser?.close();
  await withoutCsp?.close();
  for (const dir of [profile, profileWithoutCsp]) if (dir) rmSync(dir, { recursive: true, force: true });
  await admin?.close();
  await readonly?.end();
  await ctx?.close();
});

/** A user whose ID and ledger text are hostile: markup, quotes and a tail to the longest ID allowed. */
async function seedHostileUser(): Promise<void> {
  const at = new Date(`${MONTH}-10T12:00:00Z`);
  await recordUsage(ctx.ownerPool, {
    runId: 'hostile-run',
    workflowId: `cron-hostile-${MONTH}-10T12:00:00Z`,
    step: 'chat',
    attempt: 1,
    userId: HOSTILE,
    taskId: 'hostile-task',
    model: 'openai/gpt-4o-mini',
    kind: 'chat',
    status: 'ok',
    usage: fullUsage({ promptTokens: 1234, cachedPromptTokens: 0, completionTokens: 321, reasoningTokens: 0 }),
    providerModel: 'gpt-4o-mini',
    providerRequestId: `req-"<b>bold</b>`,
    workerId: 'seed',
    occurredAt: at,
  });
  await ctx.ownerPool.query(
    `insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, status, claimed_by, claimed_at, finished_at)
     values ('cron:hostile', 'hostile-task', $1, $2, 'hostile-run', $3, 'completed', 'seed', $3, $3)`,
    [HOSTILE, `cron-hostile-${MONTH}-10T12:00:00Z`, at],
  );
}

/**
 * One task, one run a day through July, 1,000 prompt tokens each, except on the 15th, when its prompt grew to
 * 3,000 tokens: cost per run 2.43x its trailing median. Only that day may be flagged.
 */
async function seedAnomaly(): Promise<void> {
  for (let day = 1; day <= 25; day++) {
    const at = new Date(`${ANOMALY_MONTH}-${String(day).padStart(2, '0')}T10:00:00Z`);
    const workflowId = `cron-steady-${at.toISOString().replace('.000Z', 'Z')}`;
    await recordUsage(ctx.ownerPool, {
      runId: `${workflowId}-run`,
      workflowId,
      step: 'chat',
      attempt: 1,
      userId: 'steady-user',
      taskId: 'steady',
      model: 'openai/gpt-4o-mini',
      kind: 'chat',
      status: 'ok',
      usage: fullUsage({ promptTokens: day === 15 ? 3000 : 1000, cachedPromptTokens: 0, completionTokens: 100, reasoningTokens: 0 }),
      providerModel: 'gpt-4o-mini',
      providerRequestId: null,
      workerId: 'seed',
      occurredAt: at,
    });
    await ctx.ownerPool.query(
      `insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, status, claimed_by, claimed_at, finished_at, duration_ms)
       values ($1, 'steady', 'steady-user', $2, $3, $4, 'completed', 'seed', $4, $4, 1500)`,
      [`cron:steady:${at.toISOString()}`, workflowId, `${workflowId}-run`, at],
    );
  }
}

const api = async <T>(path: string, headers: Record<string, string> = {}): Promise<T> => {
  const res = await fetch(`${admin.url}${path}`, { headers });
  expect(res.status, `${path}: ${await res.clone().text()}`).toBe(200);
  return (await res.json()) as T;
};

/** `report --format json --by user`: the report with the chosen cut's lines. */
type CliReport = Omit<UsageReport, 'byUser' | 'byDay' | 'byModel'> & { lines: UsageReport['byUser'] };

const cliReport = async (month: string, tz: string): Promise<CliReport> => {
  const r = await runCli(['report', '--month', month, '--tz', tz, '--format', 'json', '--by', 'user'], ctx.env);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as CliReport;
};

describe('figures', () => {
  it.each(['UTC', 'Europe/Berlin'])(
    'equal the CLI report for the same month in %s, with adjustments and credits, entries queued after the build included',
    async (tz) => {
      await cliReport(MONTH, tz); // builds the month's rollups for the zone (the admin role may not)
      // A late correction after the build: queued, not yet folded; the read-only page must count it all the same.
      await ctx.ownerPool.query(
        `insert into usage_ledger (idempotency_key, entry_type, reason, user_id, cost_usd, created_at)
       values ($1, 'credit', 'late goodwill', 'user-03', '-0.000000000000000123', $2)`,
        [`late-credit-${tz}`, `${MONTH}-20T12:00:00Z`],
      );
      const overview = await api<Overview>(`/api/overview?month=${MONTH}&tz=${encodeURIComponent(tz)}`);
      const users = await api<{ users: { userId: string; spendUsd: string; creditsUsd: string }[] }>(
        `/api/users?month=${MONTH}&tz=${encodeURIComponent(tz)}`,
      );
      const cli = await cliReport(MONTH, tz); // refreshes, then reports
      expect(overview.source).toBe('rollups');
      expect(overview.spendUsd).toBe(cli.unitEconomics.spendUsd);
      expect(overview.totalUsd).toBe(cli.totals.costUsd);
      expect(overview.creditsUsd).toBe(cli.totals.creditsUsd);
      expect(overview.creditsUsd).toMatch(/^-0\.001000000000000/);
      expect(overview.costPerCompletedRunUsd).toBe(cli.unitEconomics.costPerCompletedRunUsd);
      expect(overview.costPerActiveUserUsd).toBe(cli.unitEconomics.costPerActiveUserUsd);
      expect(overview.completedRunsPerDollar).toBe(cli.unitEconomics.completedRunsPerDollar);
      expect(overview.runs.completed).toBe(cli.unitEconomics.completedRuns);
      expect(overview.runs.failed).toBe(cli.unitEconomics.failedRuns);
      expect(overview.runs.duplicate).toBe(cli.duplicateSkippedRuns.runs);
      expect(overview.activeUsers).toBe(cli.unitEconomics.activeUsers);
      // The daily series adds up to the spend exactly.
      expect(overview.daily.reduce((s, d) => s + atto(d.costUsd), 0n)).toBe(atto(overview.spendUsd));
      // Per user: the page's spend plus credits is the CLI's per-user total.
      for (const u of users.users) {
        const cliTotal = cli.lines.filter((l) => l.userId === u.userId).reduce((s, l) => s + atto(l.costUsd), 0n);
        expect(atto(u.spendUsd) + atto(u.creditsUsd), u.userId.slice(0, 20)).toBe(cliTotal);
      }
      expect(users.users.map((u) => u.userId).sort()).toEqual([...new Set(cli.lines.map((l) => l.userId))].sort());
      expect(JSON.stringify(overview)).not.toMatch(/\d\.\d+e[+-]?\d/i); // no float notation anywhere
    },
  );

  it('refuses a zone the rollups do not track and a malformed month, naming the value', async () => {
    const res = await fetch(`${admin.url}/api/overview?month=${MONTH}&tz=Asia/Tokyo`);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toContain('"Asia/Tokyo" is not a zone the rollups track');
    const bad = await fetch(`${admin.url}/api/overview?month=2026-13`);
    expect(bad.status).toBe(400);
  });

  it('flags the seeded anomaly on the day the prompt grew, and not before', async () => {
    const overview = await api<Overview>(`/api/overview?month=${ANOMALY_MONTH}&tz=UTC`);
    const steady = overview.anomalies.filter((a) => a.id === 'steady' || a.id === 'steady-user');
    expect(steady.map((a) => [a.kind, a.id, a.startedOn, a.lastOn])).toEqual([
      ['user', 'steady-user', '2026-07-15', '2026-07-15'],
      ['task', 'steady', '2026-07-15', '2026-07-15'],
    ]);
    // 3,000 prompt + 100 completion tokens against 1,000 + 100, exactly
    expect(steady[1].costPerRunUsd).toBe('0.000510000000000000');
    expect(steady[1].trailingMedianUsd).toBe('0.000210000000000000');
  });
});

describe('budgets', () => {
  it('show "no budget" until one exists, then budget used %, tier, downgraded runs and what downgrades saved, exactly', async () => {
    const before = await api<Overview>('/api/overview');
    expect(before.budgets).toBeNull();
    const file = join(artifacts, 'budgets.json');
    writeFileSync(
      file,
      JSON.stringify({
        budgets: { users: { 'budget-user': { monthly: '0.50' } } },
        downgrade: { 'openai/gpt-4o-mini': 'openai/gpt-4.1-nano' },
      }),
    );
    const applied = await runCli(['budgets', 'apply', file], ctx.env);
    expect(applied.code, applied.stderr).toBe(0);
    // A run downgraded to the cheap model just now: 1,000,000 prompt and 100,000 completion tokens.
    const workflowId = 'cron-budget-user-now';
    await recordUsage(ctx.ownerPool, {
      runId: `${workflowId}-run`,
      workflowId,
      step: 'chat',
      attempt: 1,
      userId: 'budget-user',
      taskId: 'budget-task',
      model: 'openai/gpt-4.1-nano',
      kind: 'chat',
      status: 'ok',
      usage: fullUsage({ promptTokens: 1_000_000, cachedPromptTokens: 0, completionTokens: 100_000, reasoningTokens: 0 }),
      providerModel: 'gpt-4.1-nano',
      providerRequestId: null,
      workerId: 'seed',
    });
    await ctx.ownerPool.query(
      `insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, status, claimed_by, tier)
       values ('cron:budget-now', 'budget-task', 'budget-user', $1, $2, date_trunc('minute', now()), 'completed', 'seed', 'cheap')`,
      [workflowId, `${workflowId}-run`],
    );
    const overview = await api<Overview>('/api/overview');
    // gpt-4o-mini: 0.15 + 0.06 = 0.21 USD; gpt-4.1-nano paid: 0.10 + 0.04 = 0.14 USD
    expect(overview.budgets).toMatchObject({
      downgradedRuns: 1,
      downgradeSavings: { savedUsd: '0.070000000000000000', paidUsd: '0.140000000000000000', entries: 1, unpriced: 0 },
    });
    const users = await api<{ users: { userId: string; budgetUsedPercent: string | null; tier: string | null }[] }>('/api/users');
    expect(users.users.find((u) => u.userId === 'budget-user')).toMatchObject({ budgetUsedPercent: '28.00', tier: 'default' });
    const models = await api<{ downgradeSavings: { savedUsd: string } }>('/api/models');
    expect(models.downgradeSavings.savedUsd).toBe('0.070000000000000000');
  });
});

describe('safety', () => {
  it('refuses to bind beyond loopback without a token, with the fix, and no stack trace', async () => {
    const { CRONLEDGER_ADMIN_TOKEN: _t, ...env } = ctx.env;
    const r = await runCli(['admin', '--host', '0.0.0.0', '--port', '0'], {
      ...env,
      CRONLEDGER_ADMIN_DATABASE_URL: ctx.readonlyDatabaseUrl,
    });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('refusing to serve the admin page on 0.0.0.0 without a token');
    expect(r.stderr).toContain('CRONLEDGER_ADMIN_TOKEN');
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it('with a token: 401 without it, 200 with the bearer token or the login cookie', async () => {
    const token = 'a-long-test-token-0123456789';
    const guarded = await startAdminServer({ pool: readonly, namespace: ctx.namespace, host: '127.0.0.1', port: 0, token });
    try {
      expect((await fetch(`${guarded.url}/api/overview?month=${MONTH}`)).status).toBe(401);
      expect((await fetch(`${guarded.url}/`)).status).toBe(401);
      expect((await fetch(`${guarded.url}/metrics`)).status).toBe(401);
      expect(
        (await fetch(`${guarded.url}/api/overview?month=${MONTH}`, { headers: { Authorization: 'Bearer wrong-token-wrong-token' } }))
          .status,
      ).toBe(401);
      expect((await fetch(`${guarded.url}/api/overview?month=${MONTH}`, { headers: { Authorization: `Bearer ${token}` } })).status).toBe(
        200,
      );
      const login = await fetch(`${guarded.url}/login`, {
        method: 'POST',
        body: new URLSearchParams({ token }),
        redirect: 'manual',
      });
      expect(login.status).toBe(303);
      const cookie = login.headers.get('set-cookie')!.split(';')[0];
      expect(cookie).not.toContain(token);
      expect((await fetch(`${guarded.url}/`, { headers: { Cookie: cookie } })).status).toBe(200);
    } finally {
      await guarded.close();
    }
  });

  it('writes nothing: other methods are refused, and its database role may not write', async () => {
    for (const method of ['PUT', 'DELETE', 'PATCH']) expect((await fetch(`${admin.url}/api/overview`, { method })).status).toBe(405);
    expect((await fetch(`${admin.url}/api/overview`, { method: 'POST' })).status).toBe(405);
    const ro = new pg.Client({ connectionString: ctx.readonlyDatabaseUrl });
    await ro.connect();
    try {
      await expect(ro.query(`insert into rollup_zones (zone) values ('Asia/Tokyo')`)).rejects.toMatchObject({ code: '42501' });
      await expect(ro.query(`delete from rollup_queue`)).rejects.toMatchObject({ code: '42501' });
      await expect(ro.query(`select * from memories`)).rejects.toMatchObject({ code: '42501' });
    } finally {
      await ro.end();
    }
  });

  it('sends a Content-Security-Policy that allows only its own origin, on every response', async () => {
    const res = await fetch(`${admin.url}/?month=${MONTH}`);
    const csp = res.headers.get('content-security-policy');
    expect(csp, 'the page has a CSP header').toBeTruthy();
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toMatch(/unsafe-inline|unsafe-eval|https?:|\*/);
    for (const path of ['/users', '/tasks', '/api/overview', '/assets/admin.js', '/metrics', '/login', '/no-such-page', '/api/nothing']) {
      expect([path, (await fetch(`${admin.url}${path}`)).headers.get('content-security-policy')]).toEqual([path, csp]);
    }
  });
});

/** A request with a Host header of our choosing (fetch sets Host from the URL); the status, headers and body. */
function rawGet(url: string, host: string, headers: Record<string, string> = {}) {
  return new Promise<{ status: number; headers: Record<string, unknown>; body: string }>((resolve, reject) => {
    const req = request(url, { headers: { ...headers, Host: host } }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString('utf8')));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

const TOKEN = 'a-long-test-token-0123456789';
const guardedAdmin = (opts: Partial<Parameters<typeof startAdminServer>[0]> = {}) =>
  startAdminServer({ pool: readonly, namespace: ctx.namespace, host: '127.0.0.1', port: 0, token: TOKEN, ...opts });
const login = (url: string, token: string, headers: Record<string, string> = {}) =>
  fetch(`${url}/login`, { method: 'POST', body: new URLSearchParams({ token }), redirect: 'manual', headers });

describe('doors', () => {
  it('without a token answers only to a loopback Host with its own port: any other gets 421 (DNS rebinding)', async () => {
    const port = new URL(admin.url).port;
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LOCALHOST:${port}`]) {
      expect([host, (await rawGet(`${admin.url}/api/runs`, host)).status]).toEqual([host, 200]);
    }
    for (const host of [`rebind.attacker.example:${port}`, `127.0.0.1:${Number(port) + 1}`, '127.0.0.1', `127.0.0.1.nip.io:${port}`]) {
      const res = await rawGet(`${admin.url}/api/runs`, host);
      expect([host, res.status]).toEqual([host, 421]);
      expect(res.body).toContain('DNS rebinding');
      expect(res.body).not.toContain('user-real'); // nothing of the ledger
    }
  });

  it('with a token serves any Host name, and still only with the token', async () => {
    const guarded = await guardedAdmin();
    try {
      expect((await rawGet(`${guarded.url}/api/runs`, 'admin.example.com')).status).toBe(401);
      expect((await rawGet(`${guarded.url}/api/runs`, 'admin.example.com', { Authorization: `Bearer ${TOKEN}` })).status).toBe(200);
    } finally {
      await guarded.close();
    }
  });

  it('refuses a login body over 4 KB with 413, without reading it as a login', async () => {
    const guarded = await guardedAdmin();
    try {
      const big = await fetch(`${guarded.url}/login`, {
        method: 'POST',
        body: new URLSearchParams({ token: TOKEN, pad: 'x'.repeat(5000) }),
      });
      expect(big.status).toBe(413);
      expect(big.headers.get('set-cookie')).toBeNull();
      // The same form under the limit signs in.
      expect((await login(guarded.url, TOKEN)).status).toBe(303);
    } finally {
      await guarded.close();
    }
  });

  it('limits wrong tokens per client address: 429 with Retry-After, even for the right token, once the limit is reached', async () => {
    const guarded = await guardedAdmin();
    try {
      for (let i = 0; i < 5; i++) expect((await login(guarded.url, `wrong-token-number-${i}`)).status).toBe(401);
      const limited = await login(guarded.url, 'wrong-token-number-6');
      expect(limited.status).toBe(429);
      const retryAfter = Number(limited.headers.get('retry-after'));
      expect(retryAfter).toBeGreaterThan(0);
      expect(retryAfter).toBeLessThanOrEqual(15 * 60);
      expect(await limited.text()).toContain(`try again in ${retryAfter} seconds`);
      const right = await login(guarded.url, TOKEN);
      expect(right.status).toBe(429);
      expect(right.headers.get('set-cookie')).toBeNull();
    } finally {
      await guarded.close();
    }
  });

  it('signs in with a random server-side session: HttpOnly, SameSite=Strict, Secure over https, ended by logout and by its lifetime', async () => {
    const guarded = await guardedAdmin({ sessionMs: 3_000 });
    try {
      const cookieOf = async (res: Response) => {
        expect(res.status).toBe(303);
        return res.headers.get('set-cookie')!;
      };
      const first = await cookieOf(await login(guarded.url, TOKEN));
      const second = await cookieOf(await login(guarded.url, TOKEN));
      const value = (c: string) => c.split(';')[0];
      expect(value(first)).not.toBe(value(second)); // random per session, not derived from the token
      expect(value(first)).toMatch(/^cronledger_admin=[A-Za-z0-9_-]{43}$/);
      expect(first).not.toContain(TOKEN);
      expect(first).toMatch(/; HttpOnly/);
      expect(first).toMatch(/; SameSite=Strict/);
      expect(first).toMatch(/; Max-Age=3;/);
      expect(first).not.toMatch(/Secure/);
      expect(await cookieOf(await login(guarded.url, TOKEN, { 'X-Forwarded-Proto': 'https' }))).toMatch(/; Secure/);
      const page = (c: string) => fetch(`${guarded.url}/api/runs`, { headers: { Cookie: value(c) } });
      expect((await page(first)).status).toBe(200);
      expect((await page(second)).status).toBe(200);
      // A made-up value, whatever its shape, is nobody's session: only the IDs the server handed out are.
      expect((await page('cronledger_admin=' + 'A'.repeat(43))).status).toBe(401);
      const out = await fetch(`${guarded.url}/logout`, { method: 'POST', headers: { Cookie: value(first) }, redirect: 'manual' });
      expect(out.status).toBe(303);
      expect((await page(first)).status).toBe(401);
      expect((await page(second)).status).toBe(200);
      await new Promise((r) => setTimeout(r, 3_500)); // past the session's lifetime
      expect((await page(second)).status).toBe(401);
    } finally {
      await guarded.close();
    }
  });

  it('serves assets from a fixed list: Object property names are 404, with no stack trace', async () => {
    for (const name of ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf']) {
      const res = await fetch(`${admin.url}/assets/${name}`);
      const body = await res.text();
      expect([name, res.status]).toEqual([name, 404]);
      expect(body).not.toMatch(/\n\s+at |Error:/);
    }
    expect((await fetch(`${admin.url}/assets/admin.css`)).status).toBe(200);
  });

  it('logs a failing request with its path printable (no control characters), and answers without a stack trace', async () => {
    const broken = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 1);
    await broken.end(); // every query now fails: a 500 from inside a route
    const failing = await startAdminServer({ pool: broken, namespace: ctx.namespace, host: '127.0.0.1', port: 0 });
    const logged: string[] = [];
    const write = process.stderr.write.bind(process.stderr);
    process.stderr.write = ((chunk: string | Uint8Array) => (logged.push(String(chunk)), true)) as typeof process.stderr.write;
    let res: Response;
    try {
      res = await fetch(`${failing.url}/runs/x%1B%5B2J%0D%0Aforged%20line%E2%80%AEtxt.exe`);
    } finally {
      process.stderr.write = write;
      await failing.close();
    }
    expect(res.status).toBe(500);
    const body = await res.text();
    expect(body).toContain('internal error');
    expect(body).not.toMatch(/\n\s+at |\.ts:\d+/);
    const line = logged.find((l) => l.includes('cronledger admin: GET /runs/'))!;
    expect(line, logged.join('')).toBeDefined();
    const path = line.split(': ')[1];
    expect(path).toBe('GET /runs/x\\u{001b}[2J\\u{000d}\\u{000a}forged line\\u{202e}txt.exe');
  });

  it('serves one /metrics text for its cache window, then a fresh one', async () => {
    const cached = await startAdminServer({ pool: readonly, namespace: ctx.namespace, host: '127.0.0.1', port: 0, metricsCacheMs: 60_000 });
    const fresh = await startAdminServer({ pool: readonly, namespace: ctx.namespace, host: '127.0.0.1', port: 0, metricsCacheMs: 0 });
    const runsTotal = async (url: string) =>
      parsePrometheus(await (await fetch(`${url}/metrics`)).text())
        .find((f) => f.name === 'cronledger_runs_total')!
        .metrics.reduce((n, m) => n + BigInt(m.value!), 0n);
    try {
      const before = await runsTotal(cached.url);
      expect(await runsTotal(fresh.url)).toBe(before);
      await ctx.ownerPool.query(
        `insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, status, claimed_by)
         values ('cron:metrics-cache', 'metrics-cache', 'metrics-cache-user', 'cron-metrics-cache', 'metrics-cache-run', date_trunc('minute', now()), 'running', 'seed')`,
      );
      expect(await runsTotal(cached.url)).toBe(before);
      expect(await runsTotal(fresh.url)).toBe(before + 1n);
    } finally {
      await ctx.ownerPool.query(`delete from runs where idempotency_key = 'cron:metrics-cache'`).catch(() => undefined);
      await cached.close();
      await fresh.close();
    }
  });

  it('lists the tasks once per cache window for every /api/tasks call', async () => {
    const file = join(artifacts, 'tasks-cache.json');
    writeFileSync(file, JSON.stringify({ tasks: [{ id: 'tasks-cache', cron: '0 0 1 1 *', userId: 'tasks-cache-user', input: 'yearly' }] }));
    const applied = await runCli(['tasks', 'apply', file], ctx.env);
    expect(applied.code, applied.stderr).toBe(0);
    const cached = await startAdminServer({
      pool: readonly,
      client: ctx.client,
      namespace: ctx.namespace,
      host: '127.0.0.1',
      port: 0,
      tasksCacheMs: 60_000,
    });
    const fresh = await startAdminServer({
      pool: readonly,
      client: ctx.client,
      namespace: ctx.namespace,
      host: '127.0.0.1',
      port: 0,
      tasksCacheMs: 0,
    });
    const paused = async (url: string) =>
      ((await (await fetch(`${url}/api/tasks`)).json()) as { tasks: { id: string; paused: boolean }[] }).tasks.find(
        (t) => t.id === 'tasks-cache',
      )?.paused;
    const schedule = ctx.client.schedule.getHandle('cron-tasks-cache');
    try {
      expect(await paused(cached.url)).toBe(false);
      await schedule.pause('tasks cache test');
      expect(await paused(cached.url)).toBe(false); // the listing of a moment ago
      expect(await paused(fresh.url)).toBe(true);
    } finally {
      await schedule.delete().catch(() => undefined);
      await cached.close();
      await fresh.close();
    }
  });
});

describe('metrics', () => {
  it('parse as Prometheus text, and the cost counters match the ledger in micro-dollars', async () => {
    const res = await fetch(`${admin.url}/metrics`);
    expect(res.status).toBe(200);
    const families = parsePrometheus(await res.text());
    const family = (name: string) => families.find((f) => f.name === name);
    const charges = family('cronledger_charges_micro_usd_total')!;
    const credits = family('cronledger_credits_micro_usd_total')!;
    expect(charges.type).toBe('COUNTER');
    expect(credits.type).toBe('COUNTER');
    const { rows } = await ctx.pool.query<{ model: string; kind: string; charges: string; credits: string }>(
      `select coalesce(model, 'none') as model, coalesce(kind, 'none') as kind,
              round(coalesce(sum(cost_usd) filter (where cost_usd > 0), 0) * 1000000)::text as charges,
              round(coalesce(-sum(cost_usd) filter (where cost_usd < 0), 0) * 1000000)::text as credits
         from usage_ledger group by 1, 2`,
    );
    // (SQL rounds half away from zero, the counters half-even: no seeded sum sits exactly on a half micro-dollar)
    const byLabels = (f: typeof charges) => new Map(f.metrics.map((m) => [`${m.labels!.model}|${m.labels!.kind}`, m.value!]));
    expect(byLabels(charges)).toEqual(new Map(rows.map((r) => [`${r.model}|${r.kind}`, r.charges])));
    expect(byLabels(credits)).toEqual(new Map(rows.map((r) => [`${r.model}|${r.kind}`, r.credits])));
    expect(charges.metrics.every((m) => !('user' in (m.labels ?? {})))).toBe(true);
    const runs = family('cronledger_runs_total')!;
    const completed = runs.metrics.filter((m) => m.labels!.status === 'completed').reduce((n, m) => n + BigInt(m.value!), 0n);
    const { rows: c } = await ctx.pool.query<{ n: string }>(`select count(*)::text as n from runs where status = 'completed'`);
    expect(completed).toBe(BigInt(c[0].n));
    expect(runs.metrics.find((m) => m.labels!.status === 'completed' && m.labels!.tier === 'cheap')?.value).toBe('1');
    const utilisation = family('cronledger_budget_utilisation_ratio')!;
    expect(utilisation.metrics).toEqual([{ labels: { user: 'budget-user', tier: 'default' }, value: '0.28' }]);
    const durations = family('cronledger_run_duration_seconds')!;
    expect(durations.type).toBe('HISTOGRAM');
    // Bucket counts and the sum as the runs table has them (the steady task's 25 runs took 1.5 s each)
    const { rows: d } = await ctx.pool.query<Record<string, string>>(
      `select count(*) filter (where duration_ms <= 1000)::text as le1, count(*) filter (where duration_ms <= 2000)::text as le2,
              count(*)::text as n, (sum(duration_ms) / 1000)::text as seconds from runs where duration_ms is not null`,
    );
    expect(durations.metrics[0].buckets).toMatchObject({ '1': d[0].le1, '2': d[0].le2, '+Inf': d[0].n });
    expect(BigInt(d[0].le2) - BigInt(d[0].le1)).toBeGreaterThanOrEqual(25n);
    expect(durations.metrics[0].count).toBe(d[0].n);
    expect(Number(durations.metrics[0].sum)).toBe(Number(d[0].seconds));
    // The real run's two calls carried the moment their usage came back: each row has it, before its commit.
    const lag = family('cronledger_ledger_booking_lag_seconds')!;
    expect(lag.type).toBe('HISTOGRAM');
    const { rows: received } = await ctx.pool.query<{ ok: boolean }>(
      `select usage_received_at is not null and usage_received_at <= created_at + interval '1 second' as ok from usage_ledger where workflow_id = $1`,
      [realRun.workflowId],
    );
    expect(received.map((r) => r.ok)).toEqual([true, true]);
    expect(lag.metrics[0].count).toBe('2');
    await expectMetricsMatchRawRows(admin.url);
  });

  it('stay equal to SQL over the raw rows as runs are claimed, completed, re-tiered, deleted and found duplicate, and as the ledger grows', async () => {
    const key = 'cron:metrics-counters';
    await ctx.ownerPool.query(
      `insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, status, claimed_by)
       values ($1, 'metrics-counters', 'metrics-counters-user', 'cron-metrics-counters', 'metrics-counters-run', date_trunc('minute', now()), 'running', 'seed')`,
      [key],
    );
    await expectMetricsMatchRawRows(admin.url);
    await ctx.ownerPool.query(
      `update runs set status = 'completed', tier = 'default', duration_ms = 2001, finished_at = now() where idempotency_key = $1`,
      [key],
    );
    await expectMetricsMatchRawRows(admin.url);
    await ctx.ownerPool.query(`update runs set tier = 'cheap', duration_ms = 100 where idempotency_key = $1`, [key]);
    await expectMetricsMatchRawRows(admin.url);
    await ctx.ownerPool.query(
      `insert into run_duplicates (temporal_run_id, workflow_id, idempotency_key, task_id, user_id, detected_by)
         values ('metrics-counters-dup', 'cron-metrics-counters', $1, 'metrics-counters', 'metrics-counters-user', 'claim')`,
      [key],
    );
    await recordUsage(ctx.pool, { ...chatBooking(key, 'metrics-counters-user', new Date()), usageReceivedAt: new Date(Date.now() - 20) });
    await expectMetricsMatchRawRows(admin.url); // the new entry still queued: /metrics counts it from the queue
    // The rollup refresh folds the queue: its entries move into the counters, each counted once, and a booking after
    // that is counted from the queue beside them.
    await refreshRollups(ctx.pool);
    expect((await ctx.pool.query('select count(*)::int as n from rollup_queue')).rows[0].n).toBe(0);
    await expectMetricsMatchRawRows(admin.url);
    await recordUsage(ctx.pool, {
      ...chatBooking(`${key}:2`, 'metrics-counters-user', new Date()),
      usageReceivedAt: new Date(Date.now() - 700),
    });
    await expectMetricsMatchRawRows(admin.url);
    // The application role may not delete runs; the owner may (a deleted run leaves the counters too)
    const owner = new pg.Client({ connectionString: ctx.ownerDatabaseUrl });
    await owner.connect();
    try {
      await owner.query(`delete from run_duplicates where idempotency_key = $1`, [key]);
      await owner.query(`delete from runs where idempotency_key = $1`, [key]);
    } finally {
      await owner.end();
    }
    await expectMetricsMatchRawRows(admin.url);
  });
});

/**
 * Every series of the run counter, both histograms and the cost counters of a /metrics text, against SQL over the raw
 * runs, run_duplicates and usage_ledger rows (the bounds in seconds are the served ones, asserted here too).
 */
async function expectMetricsMatchRawRows(url: string): Promise<void> {
  const families = parsePrometheus(await (await fetch(url + '/metrics')).text());
  const family = (name: string) => families.find((f) => f.name === name)!;
  const { rows: runs } = await ctx.pool.query<{ key: string; n: string }>(
    `select status || '|' || coalesce(tier, 'none') as key, count(*)::text as n from runs group by 1
     union all select 'duplicate|none', count(*)::text from run_duplicates having count(*) > 0`,
  );
  expect(new Map(family('cronledger_runs_total').metrics.map((m) => [`${m.labels!.status}|${m.labels!.tier}`, m.value!]))).toEqual(
    new Map(runs.map((r) => [r.key, r.n])),
  );
  const histogram = async (name: string, bounds: string[], msSql: string, from: string) => {
    const { rows } = await ctx.pool.query<{ buckets: string[]; n: string; sum_ms: string }>(
      `with o as (select ${msSql} as ms from ${from})
       select array(select (select count(*) from o where o.ms <= u.b::numeric * 1000)::text
                      from unnest($1::text[]) with ordinality u(b, i) order by u.i) as buckets,
              (select count(*) from o)::text as n, (select coalesce(sum(ms), 0) from o)::text as sum_ms`,
      [bounds],
    );
    const served = family(name).metrics[0];
    expect(served.buckets).toEqual(Object.fromEntries([...bounds.map((b, i) => [b, rows[0].buckets[i]]), ['+Inf', rows[0].n]]));
    expect(served.count).toBe(rows[0].n);
    expect(served.sum).toBe(String(Number(rows[0].sum_ms) / 1000)); // whole milliseconds: exact in a double at these sizes
  };
  await histogram(
    'cronledger_run_duration_seconds',
    ['0.1', '0.5', '1', '2', '5', '10', '30', '60', '300', '1800'],
    'duration_ms',
    'runs where duration_ms is not null',
  );
  await histogram(
    'cronledger_ledger_booking_lag_seconds',
    ['0.01', '0.05', '0.1', '0.5', '1', '5', '30', '300', '3600'],
    `greatest(0, round(extract(epoch from (booked_at - usage_received_at)) * 1000))::bigint`,
    'usage_ledger where usage_received_at is not null and booked_at is not null',
  );
  const { rows: cost } = await ctx.pool.query<{ key: string; charges: string; credits: string }>(
    `select coalesce(model, 'none') || '|' || coalesce(kind, 'none') as key,
            round(coalesce(sum(cost_usd) filter (where cost_usd > 0), 0) * 1000000)::text as charges,
            round(coalesce(-sum(cost_usd) filter (where cost_usd < 0), 0) * 1000000)::text as credits
       from usage_ledger group by 1`,
  );
  const counters = costCounters(families);
  expect(counters.charges).toEqual(new Map(cost.map((r) => [r.key, r.charges])));
  expect(counters.credits).toEqual(new Map(cost.map((r) => [r.key, r.credits])));
}

/** `cronledger admin --port 0 ...` as a user starts it, over this test's read-only role; resolves once it prints its URL. */
async function startCliAdmin(args: string[]): Promise<{ url: string; stop: () => Promise<void> }> {
  const child = spawn(process.execPath, [join(repoRoot(), 'bin', 'cronledger.js'), 'admin', '--port', '0', ...args], {
    cwd: repoRoot(),
    env: { ...ctx.env, CRONLEDGER_ADMIN_DATABASE_URL: ctx.readonlyDatabaseUrl, CRONLEDGER_METRICS_PER_USER: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    child.kill('SIGTERM');
    await exited;
  };
  let output = '';
  const url = await new Promise<string>((resolve, reject) => {
    const look = (chunk: Buffer) => {
      output += chunk.toString('utf8');
      const found = /cronledger admin on (http:\/\/\S+)/.exec(output)?.[1];
      if (found) resolve(found);
    };
    child.stdout.on('data', look);
    child.stderr.on('data', look);
    void exited.then(() => reject(new Error(`cronledger admin ${args.join(' ')} exited before serving:\n${output}`)));
  });
  return { url, stop };
}

/** The charge and credit counters of a /metrics text, keyed by their labels joined with |, values as integer strings. */
function costCounters(text: string | ReturnType<typeof parsePrometheus>) {
  const families = typeof text === 'string' ? parsePrometheus(text) : text;
  const byLabels = (name: string) => {
    const family = families.find((f) => f.name === name)!;
    return new Map(family.metrics.map((m) => [Object.values(m.labels ?? {}).join('|'), m.value!]));
  };
  const charges = families.find((f) => f.name === 'cronledger_charges_micro_usd_total')!;
  return {
    labelNames: [...new Set(charges.metrics.map((m) => Object.keys(m.labels ?? {}).join(',')))],
    charges: byLabels('cronledger_charges_micro_usd_total'),
    credits: byLabels('cronledger_credits_micro_usd_total'),
  };
}

describe('metrics per user (`cronledger admin --metrics-per-user`)', () => {
  it('labels the cost counters by user only when the flag is on, and per user they still match the ledger', async () => {
    const { rows } = await ctx.pool.query<{ key: string; charges: string; credits: string }>(
      `select concat_ws('|', coalesce(model, 'none'), coalesce(kind, 'none'), user_id) as key,
              round(coalesce(sum(cost_usd) filter (where cost_usd > 0), 0) * 1000000)::text as charges,
              round(coalesce(-sum(cost_usd) filter (where cost_usd < 0), 0) * 1000000)::text as credits
         from usage_ledger group by model, kind, user_id`,
    );
    const on = await startCliAdmin(['--metrics-per-user']);
    try {
      const counters = costCounters(await (await fetch(`${on.url}/metrics`)).text());
      expect(counters.labelNames).toEqual(['model,kind,user']);
      // (SQL rounds half away from zero, the counters half-even: no seeded per-user sum sits exactly on a half micro-dollar)
      expect(counters.charges).toEqual(new Map(rows.map((r) => [r.key, r.charges])));
      expect(counters.credits).toEqual(new Map(rows.map((r) => [r.key, r.credits])));
      expect(counters.charges.get(`openai/gpt-4o-mini|chat|${HOSTILE}`)).toBeDefined(); // a hostile ID is just a label value
      expect([...counters.credits.values()].some((v) => v !== '0')).toBe(true); // credits are per user too
    } finally {
      await on.stop();
    }
    const off = await startCliAdmin([]);
    try {
      const counters = costCounters(await (await fetch(`${off.url}/metrics`)).text());
      expect(counters.labelNames).toEqual(['model,kind']);
    } finally {
      await off.stop();
    }
  });
});

// ---------------------------------------------------------------------------------------------------------------
// In the browser
// ---------------------------------------------------------------------------------------------------------------

interface Opened {
  page: Page;
  foreign: string[];
  problems: string[];
}

async function open(path: string, screenshot?: string, context = browser): Promise<Opened> {
  const page = await context.newPage();
  const foreign: string[] = [];
  const problems: string[] = [];
  const origin = new URL(admin.url).origin;
  page.on('console', (m) => m.type() === 'error' && problems.push(m.text()));
  page.on('pageerror', (e) => problems.push(e.message));
  await page.route('**/*', (route) => {
    const url = route.request().url();
    if (new URL(url).origin === origin) return route.continue();
    foreign.push(url);
    return route.abort();
  });
  const res = await page.goto(`${admin.url}${path}`);
  expect(res?.status(), path).toBe(200);
  await page.waitForFunction(() => document.body.dataset.ready === 'yes');
  if (screenshot) {
    mkdirSync(artifacts, { recursive: true });
    await page.screenshot({ path: join(artifacts, screenshot), fullPage: true });
  }
  return { page, foreign, problems };
}

/** Pixels that are not background (transparent or white) on each canvas. */
const inkedPixels = (page: Page) =>
  page.evaluate(() =>
    Array.from(document.querySelectorAll('canvas')).map((c) => {
      const { data } = c.getContext('2d')!.getImageData(0, 0, c.width, c.height);
      let inked = 0;
      for (let i = 0; i < data.length; i += 4) {
        const white = data[i] > 250 && data[i + 1] > 250 && data[i + 2] > 250;
        if (data[i + 3] > 0 && !white) inked++;
      }
      return { id: c.id, inked, width: c.width };
    }),
  );

describe('pages in headless Chromium', () => {
  const hostileHref = `/users/${encodeURIComponent(HOSTILE)}?month=${MONTH}&tz=UTC`;
  const pages = [
    [`/?month=${MONTH}`, 'overview.png', 1],
    [`/?month=${ANOMALY_MONTH}`, 'overview-anomaly.png', 1],
    [`/users?month=${MONTH}`, 'users.png', 0],
    [`/users/user-02?month=${MONTH}`, 'user.png', 1],
    [hostileHref, 'user-hostile.png', 1],
    [`/models?month=${MONTH}`, 'models.png', 0],
    ['/runs', 'runs.png', 0],
    [`/runs/${encodeURIComponent('cron-admin-real-2026-06-20T09:00:00Z')}`, 'run.png', 0],
    ['/tasks', 'tasks.png', 0],
  ] as const;

  it.each(pages)('%s opens, draws its charts, and requests nothing from another origin', async (path, shot, charts) => {
    const { page, foreign, problems } = await open(path, shot);
    try {
      expect(problems).toEqual([]);
      expect(foreign).toEqual([]);
      const canvases = await inkedPixels(page);
      expect(canvases).toHaveLength(charts);
      for (const c of canvases) expect(c.inked, c.id).toBeGreaterThan(500);
      expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
    } finally {
      await page.close();
    }
  });

  it.each(pages)('%s requests nothing from another origin even with its CSP bypassed', async (path) => {
    const { page, foreign, problems } = await open(path, undefined, withoutCsp);
    try {
      expect(foreign).toEqual([]);
      expect(problems).toEqual([]);
    } finally {
      await page.close();
    }
  });

  it('sorts the users table by spend, both ways, by the exact amounts', async () => {
    const { page } = await open(`/users?month=${MONTH}`);
    try {
      const spendColumn = () => page.$$eval('#users tbody tr', (rows) => rows.map((r) => r.children[1].getAttribute('data-sort')!));
      await page.click('#users th:nth-child(2)');
      const descending = (await spendColumn()).map(BigInt);
      expect(descending.length).toBeGreaterThan(3);
      expect([...descending].sort((a, b) => (a < b ? 1 : a > b ? -1 : 0))).toEqual(descending);
      await page.click('#users th:nth-child(2)');
      const ascending = (await spendColumn()).map(BigInt);
      expect(ascending).toEqual([...descending].reverse());
      await page.click('#users th:nth-child(1)');
      const ids = await page.$$eval('#users tbody tr', (rows) => rows.map((r) => r.children[0].textContent!));
      expect(ids).toEqual([...ids].sort().reverse());
    } finally {
      await page.close();
    }
  });

  it('renders hostile values as text', async () => {
    const { page } = await open(hostileHref);
    try {
      expect(await page.locator('.user-id code').textContent()).toBe(HOSTILE);
      expect(await page.locator('img').count()).toBe(0);
      expect(await page.locator('b').count()).toBe(0);
      expect(await page.locator('text=req-"<b>bold</b>').count()).toBe(1);
      expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
    } finally {
      await page.close();
    }
  });

  it('shows a run with its ledger rows, and its link opens that workflow in the Temporal Web UI', async () => {
    const { page } = await open('/runs');
    try {
      const row = page.locator('tr', { hasText: realRun.workflowId });
      await row.locator('a.ledger-link').click();
      await page.waitForURL(/\/runs\/cron-admin-real/);
      const entries = await page.$$eval('table.entries tbody tr', (rows) =>
        rows.map((r) => Array.from(r.children).map((c) => c.textContent)),
      );
      expect(entries.length).toBe(2); // chat and embedding
      expect(entries.map((e) => e[10])).toEqual(['v1', 'v1']); // price version
      await page.goBack();
      const href = await page.locator('tr', { hasText: realRun.workflowId }).locator('a.temporal-link').getAttribute('href');
      expect(href).toBe(
        `${inject('stack').uiUrl}/namespaces/${ctx.namespace}/workflows/${encodeURIComponent(realRun.workflowId)}/${realRun.runId}/history`,
      );
      await page.unroute('**/*');
      await page.locator('tr', { hasText: realRun.workflowId }).locator('a.temporal-link').click();
      await page.waitForURL(/\/history/);
      await page.getByText(realRun.workflowId).first().waitFor({ timeout: 30_000 });
      await page.screenshot({ path: join(artifacts, 'temporal-ui.png') });
    } finally {
      await page.close();
    }
  });
});
