import { Worker } from '@temporalio/worker';
import { createServer, type Server } from 'node:http';
import { mkdtemp, readFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPORT_SCHEDULE_ID } from '../src/constants';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { previousMonthOf } from '../src/reports/month';
import { ensureReportSchedule } from '../src/schedules/report-schedule';
import type { MonthlyReportResult } from '../src/workflows/monthly-report';
import { atto, ledgerSums, seedMonth } from './support/report-fixtures';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { waitFor } from './support/wait';
import { startWorkers, workflowBundle } from './support/workers';

let ctx: TestContext;
let reportsRoot: string;
let hook: { server: Server; url: string; requests: { body: string; status: number }[] };
const MONTH = '2026-06';

/** A webhook receiver that answers 503 twice, then 200 to everything. */
async function startFlakyWebhook(failFirst = 2): Promise<typeof hook> {
  const requests: { body: string; status: number }[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const status = requests.length < failFirst ? 503 : 200;
      requests.push({ body, status });
      res.writeHead(status, { 'content-type': 'text/plain' }).end(status === 200 ? 'ok' : 'try again');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { server, url: `http://127.0.0.1:${port}/services/T000/B000/secret`, requests };
}

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.pool, loadPricesFile('prices/standard.json'), 'test');
  await seedMonth(ctx.pool, { month: MONTH, users: 4, callsPerUser: 8 });
  reportsRoot = await mkdtemp(join(tmpdir(), 'cronledger-reports-'));
  hook = await startFlakyWebhook();
});

afterAll(async () => {
  await new Promise((r) => hook?.server.close(r));
  await ctx?.close();
});

const readAll = (r: MonthlyReportResult) => Promise.all(r.files.map((f) => readFile(f.path)));
const posted = () => hook.requests.filter((r) => r.status === 200);

describe('monthlyReport through Temporal', () => {
  it('writes the four artifacts, delivers once despite a flaky webhook, and a second run is byte-identical and silent', async () => {
    const fleet = await startWorkers(ctx, 1, { reportsDir: reportsRoot, reportWebhookUrl: hook.url });
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
    const described = await ctx.client.schedule.getHandle(REPORT_SCHEDULE_ID).describe();
    expect(described.spec.timezone).toBe(zone);
    expect(described.memo).toEqual({ managedBy: 'cronledger', kind: 'report' });
    expect(described.action).toMatchObject({ type: 'startWorkflow', workflowType: 'monthlyReport' });

    const fleet = await startWorkers(ctx, 1, { reportsDir: reportsRoot, reportWebhookUrl: hook.url });
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
