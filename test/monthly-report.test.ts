import { Worker } from '@temporalio/worker';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { mkdtemp, readFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Webhook as Verifier } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../src/config';
import { REPORT_SCHEDULE_ID } from '../src/constants';
import { UserError } from '../src/errors';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { postJson, readWebhook, webhookId, WebhookRejectedError } from '../src/reports/delivery';
import { previousMonthOf } from '../src/reports/month';
import { ensureReportSchedule } from '../src/schedules/report-schedule';
import type { MonthlyReportResult } from '../src/workflows/monthly-report';
import { atto, ledgerSums, seedMonth } from './support/report-fixtures';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { waitFor } from './support/wait';
import { startWorkers, workflowBundle } from './support/workers';
import { describeSchedule } from '../src/schedules/describe-schedule';

let ctx: TestContext;
let reportsRoot: string;
type Received = { body: string; status: number; headers: IncomingHttpHeaders };
let hook: { server: Server; url: string; requests: Received[] };
const MONTH = '2026-06';
/** The signing secret, as Standard Webhooks write one: whsec_ and the base64 of random bytes. */
const SECRET = `whsec_${randomBytes(32).toString('base64')}`;

/**
 * A webhook receiver that answers 503 twice, then 200 to everything. Its error page echoes the request's path, as
 * many do: the sender must not keep it, since the path is the URL's secret.
 */
async function startFlakyWebhook(failFirst = 2): Promise<typeof hook> {
  const requests: Received[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const status = requests.length < failFirst ? 503 : 200;
      requests.push({ body, status, headers: req.headers });
      res.writeHead(status, { 'content-type': 'text/plain' }).end(status === 200 ? 'ok' : `try again later: ${req.url}`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { server, url: `http://127.0.0.1:${port}/services/T000/B000/secret`, requests };
}

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await seedMonth(ctx.ownerPool, { month: MONTH, users: 4, callsPerUser: 8 });
  reportsRoot = await mkdtemp(join(tmpdir(), 'cronledger-reports-'));
  hook = await startFlakyWebhook();
});

afterAll(async () => {
  await new Promise((r) => hook?.server.close(r));
  await ctx?.close();
});

const readAll = (r: MonthlyReportResult) => Promise.all(r.files.map((f) => readFile(f.path)));
const posted = () => hook.requests.filter((r) => r.status === 200);
/** What the receiver's Standard Webhooks library makes of a request: the payload, or its verification error. */
const verify = (r: Pick<Received, 'body' | 'headers'>) => new Verifier(SECRET).verify(r.body, r.headers as Record<string, string>);

describe('monthlyReport through Temporal', () => {
  it('writes the four artifacts, delivers once despite a flaky webhook, and a second run is byte-identical and silent', async () => {
    const fleet = await startWorkers(ctx, 1, { reportsDir: reportsRoot, reportWebhookUrl: hook.url, reportWebhookSecret: SECRET });
    await fleet.runWhile(async () => {
      // `report deliver` starts the workflow through Temporal, waits, and prints where the artifacts are.
      const first = await runCli(['report', 'deliver', '--month', MONTH, '--tz', 'UTC', '--json'], ctx.env);
      expect(first.code, first.stderr).toBe(0);
      const r1 = JSON.parse(first.stdout) as MonthlyReportResult & { workflowId: string };
      expect(r1.workflowId).toBe(`report-monthly-${MONTH}`);
      expect(r1.dir).toBe(join(reportsRoot, MONTH));
      expect(r1.files.map((f) => f.name)).toEqual(['usage.json', 'usage.csv', 'usage.md', 'usage.html']);
      expect(r1.delivery).toEqual({ status: 'posted', target: new URL(hook.url).origin, attempt: 3 });

      // Two 503s, then one accepted post, with a Slack-compatible body.
      expect(hook.requests.map((r) => r.status)).toEqual([503, 503, 200]);
      // Each attempt signed, verified by the receiver's library, under one webhook-id it can dedupe on.
      for (const r of hook.requests) expect(verify(r)).toEqual(JSON.parse(r.body));
      expect(new Set(hook.requests.map((r) => r.headers['webhook-id'])).size).toBe(1);
      const payload = JSON.parse(posted()[0].body) as { text: string; blocks: { type: string }[] };
      expect(payload.text).toContain(`usage report ${MONTH}`);
      expect(payload.blocks.map((b) => b.type)).toEqual(['header', 'section', 'section', 'context']);
      expect(JSON.stringify(payload)).toContain(r1.dir);

      // The artifacts hold the ledger's exact total.
      const json = JSON.parse(await readFile(join(r1.dir, 'usage.json'), 'utf8')) as { totals: { costUsd: string } };
      expect(atto(json.totals.costUsd)).toBe(atto((await ledgerSums(ctx.pool, 'UTC', MONTH, 'total')).get('total')!));
      const bytes = await readAll(r1);

      // Again: same ID (the previous run is closed, so it runs anew), same bytes, no second post.
      const second = await runCli(['report', 'deliver', '--month', MONTH, '--tz', 'UTC'], ctx.env);
      expect(second.code, second.stderr).toBe(0);
      expect(second.stdout).toContain(`artifacts in ${join(reportsRoot, MONTH)}`);
      expect(second.stdout).toContain('already delivered');
      const runs = await ctx.client.workflow.count(`WorkflowId = 'report-monthly-${MONTH}'`);
      expect(runs.count).toBe(2);
      const again = await readAll(r1);
      again.forEach((b, i) => expect(b.equals(bytes[i]), r1.files[i].name).toBe(true));
      expect(hook.requests).toHaveLength(3);
      const deliveries = await ctx.pool.query('select month, complete, attempt from report_deliveries');
      expect(deliveries.rows).toEqual([{ month: MONTH, complete: true, attempt: 3 }]);

      // The workflow replays from its history: deterministic.
      const history = await ctx.client.workflow.getHandle(`report-monthly-${MONTH}`).fetchHistory();
      await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, history);
    });
  });

  it('runs from the report-monthly schedule for the month before the scheduled time, in the schedule zone', async () => {
    const zone = 'Europe/Berlin';
    expect(await ensureReportSchedule(ctx.client, { timezone: 'UTC', taskQueue: ctx.taskQueue })).toBe('created');
    expect(await ensureReportSchedule(ctx.client, { timezone: 'UTC', taskQueue: ctx.taskQueue })).toBe('unchanged');
    expect(await ensureReportSchedule(ctx.client, { timezone: zone, taskQueue: ctx.taskQueue })).toBe('updated');
    const described = await describeSchedule(ctx.client, REPORT_SCHEDULE_ID);
    expect(described.spec.timezone).toBe(zone);
    expect(described.memo).toEqual({ managedBy: 'cronledger', kind: 'report' });
    expect(described.action).toMatchObject({ type: 'startWorkflow', workflowType: 'monthlyReport' });

    const fleet = await startWorkers(ctx, 1, { reportsDir: reportsRoot, reportWebhookUrl: hook.url, reportWebhookSecret: SECRET });
    try {
      await fleet.runWhile(async () => {
        const before = new Date();
        await ctx.client.schedule.getHandle(REPORT_SCHEDULE_ID).trigger();
        const query = `WorkflowType = 'monthlyReport' AND TemporalScheduledById = '${REPORT_SCHEDULE_ID}'`;
        await waitFor(
          async () => (await ctx.client.workflow.count(`${query} AND ExecutionStatus = 'Completed'`)).count === 1,
          60_000,
          'scheduled report',
        );
        const [execution] = await collect(ctx.client.workflow.list({ query }));
        expect(execution.workflowId).toMatch(/^report-monthly-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
        const result = (await ctx.client.workflow.getHandle(execution.workflowId).result()) as MonthlyReportResult;
        // Triggered now: the nominal time is now, so the report covers the month before this one in Berlin.
        const expected = [previousMonthOf(before, zone), previousMonthOf(new Date(), zone)];
        expect(expected).toContain(result.month);
        expect(result.timeZone).toBe(zone);
        expect(result.dir).toBe(join(reportsRoot, result.month));
        expect(result.delivery.status).toBe('posted');
      });
    } finally {
      await ctx.client.schedule.getHandle(REPORT_SCHEDULE_ID).delete();
    }
  });
});

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

/** A receiver that answers every request with `status`, `headers` and `body`; what it received. */
async function receiver(status: number, headers: Record<string, string> = {}, body = '') {
  const requests: Received[] = [];
  const server = createServer((req, res) => {
    let text = '';
    req.on('data', (c) => (text += c));
    req.on('end', () => {
      requests.push({ body: text, status, headers: req.headers });
      res.writeHead(status, headers).end(body.replaceAll('{path}', req.url ?? ''));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { origin, requests, close: () => new Promise((r) => server.close(r)) };
}

const VARS = { url: 'REPORT_WEBHOOK_URL', secret: 'REPORT_WEBHOOK_SECRET' };
const hookAt = (url: string) => readWebhook(url, SECRET, VARS)!;

describe('webhook deliveries', () => {
  it('are signed as Standard Webhooks do, and a changed body or another secret fails verification', async () => {
    const r = await receiver(200);
    try {
      const id = webhookId('budget:user-ü:UTC:2026-06:80');
      expect(await postJson(hookAt(`${r.origin}/hook`), id, { hello: 'world' })).toBe(200);
      expect(await postJson(hookAt(`${r.origin}/hook`), id, { hello: 'again' })).toBe(200);
      const [first, second] = r.requests;
      expect(verify(first)).toEqual({ hello: 'world' });
      expect(first.headers['webhook-id']).toBe(id);
      expect(second.headers['webhook-id']).toBe(id); // a redelivery of the same event: the same id
      expect(first.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
      expect(() => verify({ ...first, body: first.body.replace('world', 'World') })).toThrow();
      const other = `whsec_${randomBytes(32).toString('base64')}`;
      expect(() => new Verifier(other).verify(first.body, first.headers as Record<string, string>)).toThrow();
    } finally {
      await r.close();
    }
  });

  it('refuse redirects: a 307 is a failed delivery naming the status, and the place it points to gets nothing', async () => {
    const elsewhere = await receiver(200);
    const redirecting = await receiver(307, { location: `${elsewhere.origin}/collect` });
    try {
      const err = await postJson(hookAt(`${redirecting.origin}/hook`), 'msg_1', { a: 1 }).catch((e: Error) => e);
      expect(err).toBeInstanceOf(WebhookRejectedError);
      expect((err as Error).message).toContain(`webhook ${redirecting.origin} answered 307 Temporary Redirect`);
      expect((err as Error).message).toContain('redirects are not followed');
      expect(redirecting.requests).toHaveLength(1);
      expect(elsewhere.requests).toHaveLength(0);
    } finally {
      await redirecting.close();
      await elsewhere.close();
    }
  });

  it('keep nothing of the response: a 404 page echoing the secret path is not in the error', async () => {
    const token = `planted-${randomBytes(8).toString('hex')}`;
    for (const [status, kind] of [
      [404, WebhookRejectedError],
      [500, Error],
    ] as const) {
      const r = await receiver(status, { 'content-type': 'text/html' }, `<h1>No route for {path}</h1> ${'x'.repeat(300)}`);
      try {
        const err = await postJson(hookAt(`${r.origin}/services/${token}`), 'msg_2', { a: 1 }).catch((e: Error) => e);
        expect(err).toBeInstanceOf(kind);
        expect((err as Error).message).toBe(
          `webhook ${r.origin} answered ${status} ${status === 404 ? 'Not Found' : 'Internal Server Error'}`,
        );
      } finally {
        await r.close();
      }
    }
  });

  it('require https except to a loopback receiver, naming the variable and the host (never the path)', () => {
    const bad = () => readWebhook('http://hooks.example.com/services/T0/B0/secret-path', SECRET, VARS);
    expect(bad).toThrow(UserError);
    expect(bad).toThrow('REPORT_WEBHOOK_URL is http://hooks.example.com/... over plain http');
    expect(bad).toThrow('change it to https://hooks.example.com/...');
    expect(bad).not.toThrow(/secret-path/);
    for (const ok of ['https://hooks.example.com/x', 'http://127.0.0.1:8080/x', 'http://localhost:9/x', 'http://[::1]:9/x']) {
      expect(readWebhook(ok, SECRET, VARS)?.url).toBe(ok);
    }
    expect(readWebhook('', SECRET, VARS)).toBeUndefined();
  });

  it('require a Standard Webhooks secret beside the URL, naming the variable and the fix, never echoing it', () => {
    const url = 'https://hooks.example.com/x';
    expect(() => readWebhook(url, undefined, VARS)).toThrow('REPORT_WEBHOOK_URL is set but REPORT_WEBHOOK_SECRET is not');
    for (const secret of ['plain-password-1234567890', 'whsec_dG9vIHNob3J0', 'whsec_not base64 at all!!!!!!!!!!!!!!!!']) {
      const err = (() => {
        try {
          readWebhook(url, secret, VARS);
        } catch (e) {
          return e as Error;
        }
      })();
      expect(err?.message).toContain('REPORT_WEBHOOK_SECRET is not a webhook signing secret');
      expect(err?.message).toContain('whsec_$(openssl rand -base64 32)');
      expect(err?.message).not.toContain(secret);
    }
  });

  it('are checked when the worker starts: a webhook URL without its secret stops it with the fix', () => {
    const r = spawnSync(process.execPath, ['bin/worker.js'], {
      cwd: repoRoot(),
      env: { ...ctx.env, REPORT_WEBHOOK_URL: 'https://hooks.example.com/x', REPORT_WEBHOOK_SECRET: '', BUDGET_WEBHOOK_URL: '' },
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('REPORT_WEBHOOK_URL is set but REPORT_WEBHOOK_SECRET is not');
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});
