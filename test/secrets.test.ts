import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createReportActivities } from '../src/activities/report-activities';
import { repoRoot } from '../src/config';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { startFakeOpenAI, type FakeOpenAI } from './support/fake-openai';
import { describeSchedule } from '../src/schedules/describe-schedule';

/**
 * Planted secrets (the database passwords, an OpenAI API key, a webhook URL's token) must not appear in anything a
 * full run leaves behind: CLI output, the worker's log, workflow inputs, results, memos, search attributes and whole
 * histories as Temporal stores them, schedules, and report artifacts.
 */

let ctx: TestContext;
let fake: FakeOpenAI;
let webhook: Server;
let worker: ChildProcess;
let workerLog = '';
const cliOutput: string[] = [];
const reportsDir = mkdtempSync(join(tmpdir(), 'cronledger-secrets-reports-'));
const secrets: Record<string, string> = {};
let env: NodeJS.ProcessEnv;
/** Ledger entries are dated when they are booked, so the report that shows them is this month's (so far). */
const MONTH = new Date().toISOString().slice(0, 7);
const SLOTS = '2026-06-03';

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  fake = await startFakeOpenAI();
  fake.script('chat', { kind: 'error', status: 500, message: 'transient' }); // an error path, retried, is output too
  webhook = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200).end('ok'));
  });
  await new Promise<void>((r) => webhook.listen(0, '127.0.0.1', r));

  secrets.appPassword = new URL(ctx.databaseUrl).password;
  secrets.ownerPassword = new URL(ctx.ownerDatabaseUrl).password;
  secrets.apiKey = `sk-planted-${randomUUID()}`;
  secrets.webhookToken = `planted-webhook-${randomUUID()}`;
  secrets.webhookSecret = `whsec_${Buffer.from(`planted-signing-key-${randomUUID()}`).toString('base64')}`;
  const webhookUrl = `http://127.0.0.1:${(webhook.address() as { port: number }).port}/services/T0/B0/${secrets.webhookToken}`;
  env = {
    ...ctx.env,
    MODEL_PROVIDER: 'openai',
    OPENAI_BASE_URL: fake.baseURL,
    OPENAI_API_KEY: secrets.apiKey,
    REPORT_WEBHOOK_URL: webhookUrl,
    REPORT_WEBHOOK_SECRET: secrets.webhookSecret,
    CRONLEDGER_REPORTS_DIR: reportsDir,
    CRONLEDGER_WORKER_ID: 'secrets-worker',
  };

  // A real worker process, as a replica runs it: its stdout and stderr are its log. It loads the run's workflow bundle
  // (CRONLEDGER_WORKFLOW_BUNDLE) instead of running webpack, as the fault tests' workers do.
  worker = spawn(process.execPath, ['bin/worker.js'], {
    cwd: repoRoot(),
    env: { ...env, CRONLEDGER_WORKFLOW_BUNDLE: inject('stack').workflowBundlePath },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  worker.stdout!.on('data', (c: Buffer) => (workerLog += c.toString('utf8')));
  worker.stderr!.on('data', (c: Buffer) => (workerLog += c.toString('utf8')));
  await waitForPoller();
});

afterAll(async () => {
  worker?.kill('SIGTERM');
  await new Promise((r) => (worker?.exitCode !== null ? r(null) : worker.once('exit', r)));
  await fake?.close();
  await new Promise((r) => webhook?.close(r));
  await ctx?.close();
  rmSync(reportsDir, { recursive: true, force: true });
});

async function waitForPoller(): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if (worker.exitCode !== null) throw new Error(`the worker exited:\n${workerLog}`);
    const { pollers } = await ctx.client.connection.workflowService.describeTaskQueue({
      namespace: ctx.namespace,
      taskQueue: { name: ctx.taskQueue },
    });
    if (pollers.some((p) => p.identity === 'secrets-worker')) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`the worker never polled:\n${workerLog}`);
}

async function cli(args: string[], expectOk = true): Promise<void> {
  const r = await runCli(args, env);
  if (expectOk) expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
  cliOutput.push(`$ cronledger ${args.join(' ')}\n${r.stdout}${r.stderr}`);
}

/**
 * Everything inside a value as text: byte arrays (Temporal payloads) decoded as UTF-8, bigints and Longs as numbers.
 * Decoded before JSON.stringify, which would otherwise turn a Buffer into a list of byte values first (toJSON).
 */
function asText(value: unknown): string {
  const decode = (v: unknown): unknown => {
    if (v instanceof Uint8Array) return Buffer.from(v).toString('utf8');
    if (typeof v === 'bigint') return v.toString();
    if (Array.isArray(v)) return v.map(decode);
    if (v && typeof v === 'object') {
      if (typeof (v as { toNumber?: unknown }).toNumber === 'function') return String(v);
      if (v instanceof Date) return v.toISOString();
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, decode(x)]));
    }
    return v;
  };
  return JSON.stringify(decode(value));
}

function readTree(dir: string): string {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((d) => d.isFile())
    .map((d) => `--- ${join(d.parentPath, d.name)}\n${readFileSync(join(d.parentPath, d.name), 'utf8')}`)
    .join('\n');
}

describe('after a full run with planted secrets', () => {
  const outputs: Record<string, string> = {};

  beforeAll(async () => {
    const tasksFile = join(reportsDir, '..', `secrets-tasks-${process.pid}.json`);
    writeFileSync(
      tasksFile,
      JSON.stringify({ tasks: [{ id: 'secret-digest', cron: '0 * * * *', userId: 'secret-user', input: 'Summarise.' }] }),
    );
    await cli(['tasks', 'apply', tasksFile]);
    rmSync(tasksFile);
    await cli(['tasks', 'list']);
    await cli(['backfill', '--task', 'secret-digest', '--from', `${SLOTS}T00:00:00Z`, '--to', `${SLOTS}T02:00:00Z`]);
    await cli(['runs', '--json']);
    await cli(['ledger', '--json']);
    await cli(['prices', 'list']);
    for (const format of ['table', 'json', 'csv', 'md']) await cli(['report', '--month', MONTH, '--format', format]);
    await cli(['report', 'deliver', '--month', MONTH, '--json']);
    await cli(['rollups', 'status']);
    await cli(['dev', 'status', '--json']);
    await cli(['runs', '--task', 'no-such-task']);
    await cli(['ledger', 'credit', '--user', 'secret-user', '--amount', 'x', '--reason', 'r'], false); // an error path

    const histories: string[] = [];
    for await (const wf of ctx.client.workflow.list()) {
      const handle = ctx.client.workflow.getHandle(wf.workflowId, wf.runId);
      histories.push(asText({ described: await handle.describe(), history: await handle.fetchHistory() }));
    }
    const schedules: string[] = [];
    for await (const s of ctx.client.schedule.list()) schedules.push(asText(await describeSchedule(ctx.client, s.scheduleId)));

    Object.assign(outputs, {
      cli: cliOutput.join('\n'),
      workerLog,
      histories: histories.join('\n'),
      schedules: schedules.join('\n'),
      artifacts: readTree(reportsDir),
    });
  });

  it('the run really happened: workflows, chat calls through the fake with the key, artifacts, a webhook post', () => {
    expect(outputs.histories.includes(`cron-secret-digest-${SLOTS}T00:00:00Z`)).toBe(true);
    // Payloads were decoded: the delivery's result is readable text (JSON inside JSON, hence the escaped quotes).
    expect(outputs.histories.includes('\\"status\\":\\"posted\\"'), 'decoded delivery result in the histories').toBe(true);
    expect(outputs.histories).toContain('monthlyReport');
    expect(outputs.artifacts).toContain('secret-user');
    expect(outputs.cli).toContain('posted');
    expect(fake.requests.length).toBeGreaterThanOrEqual(4);
    expect(fake.requests[0].headers.authorization).toBe(`Bearer ${secrets.apiKey}`);
  });

  it.each(['cli', 'workerLog', 'histories', 'schedules', 'artifacts'])('%s holds none of them', (where) => {
    expect(outputs[where].length).toBeGreaterThan(0);
    for (const [name, secret] of Object.entries(secrets)) {
      expect(outputs[where].includes(secret), `${name} appears in ${where}`).toBe(false);
    }
  });
});

describe('a malformed REPORT_WEBHOOK_URL', () => {
  it('fails delivery at once with the fix, without its value (which would land in history and logs)', async () => {
    const token = `planted-${randomUUID()}`;
    const activities = createReportActivities({ pool: ctx.pool, reportWebhookUrl: `hxxps//hooks.slack.com/services/T0/B0/${token}` });
    const err = await activities.deliverMonthlyReport({ generated: {} as never }).catch((e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toContain('REPORT_WEBHOOK_URL is not an http(s) URL');
    expect((err as Error).message).not.toContain(token);
    expect((err as { nonRetryable?: boolean }).nonRetryable).toBe(true);
  });
});
