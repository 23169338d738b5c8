/**
 * How fast does the Temporal dev server START the workflows of N schedules that share one minute? Nothing else is
 * measured: the started workflows' task queue has no worker, so each start is the scheduler's work alone (its own
 * workflow, run by the server's internal per-namespace worker, waking on a timer and starting the action through a
 * local activity). P1 (bench/fan-out.ts) drains no faster than this.
 *
 * Each variant gets a fresh dev server, started with `dev up`'s flags (src/dev/temporal-server.ts devServerTuningArgs)
 * plus the variant's dynamic config, in a temp dir; variants run one after the other in one run.
 *
 *   node --import tsx bench/schedule-fire.ts [--schedules 1000] [--lead 45] [--only dev,default-worker,...]
 *
 * Variants:
 *   dev             the flags `dev up` passes today (DEV_SERVER_DYNAMIC_CONFIG)
 *   old-dev         without DEV_SERVER_DYNAMIC_CONFIG's poller and partition settings (only the start rate raised)
 *   journal         old-dev with SQLite's rollback journal (no journal_mode=wal / synchronous=normal)
 *   defaults        none of dev up's flags: the dev server as `temporal server start-dev` runs it
 *   ns-workers-4    old-dev with 4 internal per-namespace workers (each with its own 2 pollers and sticky queue)
 *   sticky-5s, sticky-10s, sticky-20s, sticky-60s
 *                   dev with the internal worker's sticky schedule-to-start timeout set to that value
 *
 * Prints per variant: slot to first, median, 90th percentile and last start, starts in each 10 s, and the scheduler's
 * sticky workflow tasks that timed out waiting for the internal worker (history's schedule_to_start_timeout).
 */
import { Client, Connection } from '@temporalio/client';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePorts } from '../src/dev/ports';
import { findTemporalCli } from '../src/dev/temporal-cli';
import { DEV_SERVER_DYNAMIC_CONFIG, DEV_SERVER_SQLITE_PRAGMAS } from '../src/dev/temporal-server';

const arg = (name: string, fallback: string): string => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && process.argv[i + 1] ? process.argv[i + 1] : fallback;
};
const scheduleCount = Number(arg('schedules', '1000'));
const leadS = Number(arg('lead', '45'));
const command = `node --import tsx bench/schedule-fire.ts ${process.argv.slice(2).join(' ')}`.trim();
const log = (line: string): void => void process.stderr.write(`${new Date().toISOString()} ${line}\n`);

const pragmaArgs = DEV_SERVER_SQLITE_PRAGMAS.flatMap((p) => ['--sqlite-pragma', p]);
const configArgs = (config: Record<string, unknown>): string[] =>
  Object.entries(config).flatMap(([key, value]) => ['--dynamic-config-value', `${key}=${JSON.stringify(value)}`]);
const startRateOnly = {
  'worker.schedulerNamespaceStartWorkflowRPS': DEV_SERVER_DYNAMIC_CONFIG['worker.schedulerNamespaceStartWorkflowRPS'],
};

const VARIANTS: Record<string, string[]> = {
  dev: [...pragmaArgs, ...configArgs(DEV_SERVER_DYNAMIC_CONFIG)],
  'old-dev': [...pragmaArgs, ...configArgs(startRateOnly)],
  journal: configArgs(startRateOnly),
  defaults: [],
  'ns-workers-4': [...pragmaArgs, ...configArgs({ ...startRateOnly, 'worker.perNamespaceWorkerCount': 4 })],
  ...Object.fromEntries(
    ['5s', '10s', '20s', '60s'].map((timeout) => [
      `sticky-${timeout}`,
      [
        ...pragmaArgs,
        ...configArgs({
          ...DEV_SERVER_DYNAMIC_CONFIG,
          'worker.perNamespaceWorkerOptions': {
            ...(DEV_SERVER_DYNAMIC_CONFIG['worker.perNamespaceWorkerOptions'] as object),
            StickyScheduleToStartTimeout: timeout,
          },
        }),
      ],
    ]),
  ),
};

interface Figures {
  variant: string;
  started: number;
  firstS: number;
  medianS: number;
  p90S: number;
  lastS: number;
  per10s: Record<string, number>;
  stickyTimeouts: number;
}

async function main(): Promise<void> {
  const cli = findTemporalCli();
  if (!cli) throw new Error('no temporal CLI: run `npx cronledger dev install` first');
  const only = arg('only', 'dev,old-dev').split(',');
  for (const v of only) if (!VARIANTS[v]) throw new Error(`unknown variant ${v} (known: ${Object.keys(VARIANTS).join(', ')})`);
  const results: Figures[] = [];
  for (const variant of only) results.push(await runVariant(cli.path, variant));
  process.stdout.write(report(results));
}

async function runVariant(cliPath: string, variant: string): Promise<Figures> {
  const dir = mkdtempSync(join(tmpdir(), 'cronledger-schedule-fire-'));
  const [port, uiPort, metricsPort] = await freePorts(3);
  const args = ['server', 'start-dev', '--db-filename', join(dir, 'temporal.db'), ...VARIANTS[variant]];
  args.push('--ip', '127.0.0.1', '--port', String(port), '--ui-port', String(uiPort), '--metrics-port', String(metricsPort));
  args.push('--log-level', 'error');
  log(`${variant}: temporal ${args.join(' ')}`);
  const server = spawn(cliPath, args, { stdio: 'ignore' });
  try {
    const client = await connect(`127.0.0.1:${port}`, server);
    const taskQueue = `nobody-polls-${variant}`;
    const slot = new Date(Math.ceil((Date.now() + leadS * 1000) / 60_000) * 60_000);
    const created = Date.now();
    for (let i = 0; i < scheduleCount; i += 50) {
      await Promise.all(
        Array.from({ length: Math.min(50, scheduleCount - i) }, (_, k) =>
          client.schedule.create({
            scheduleId: `fire-${i + k}`,
            spec: { calendars: [{ hour: slot.getUTCHours(), minute: slot.getUTCMinutes() }] },
            action: { type: 'startWorkflow', workflowType: 'nothingPollsThis', taskQueue, workflowId: `fire-${i + k}` },
          }),
        ),
      );
    }
    log(`${variant}: ${scheduleCount} schedules created in ${((Date.now() - created) / 1000).toFixed(1)} s, fire at ${slot.toISOString()}`);
    if (Date.now() > slot.getTime() - 2_000) throw new Error('the schedules took past the slot; run with a longer --lead');
    await sleep(slot.getTime() - Date.now());
    const deadline = Date.now() + 5 * 60_000;
    let n = 0;
    while ((n = (await client.workflow.count(`TaskQueue = '${taskQueue}'`)).count) < scheduleCount) {
      if (Date.now() > deadline) throw new Error(`${variant}: only ${n} of ${scheduleCount} started within 5 minutes of the slot`);
      await sleep(1000);
    }
    const starts: number[] = [];
    for await (const w of client.workflow.list({ query: `TaskQueue = '${taskQueue}'` }))
      starts.push((w.startTime.getTime() - slot.getTime()) / 1000);
    starts.sort((a, b) => a - b);
    const per10s: Record<string, number> = {};
    for (const s of starts) per10s[Math.floor(s / 10) * 10] = (per10s[Math.floor(s / 10) * 10] ?? 0) + 1;
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    const stickyTimeouts = metrics
      .split('\n')
      .filter((l) => l.startsWith('schedule_to_start_timeout{') && l.includes('WorkflowTaskTimeout'))
      .reduce((sum, l) => sum + Number(l.split(' ').pop()), 0);
    await client.connection.close();
    const q = (p: number): number => starts[Math.min(starts.length - 1, Math.floor(starts.length * p))];
    const figures = {
      variant,
      started: starts.length,
      firstS: starts[0],
      medianS: q(0.5),
      p90S: q(0.9),
      lastS: starts.at(-1) ?? NaN,
      per10s,
      stickyTimeouts,
    };
    log(JSON.stringify(figures));
    return figures;
  } finally {
    server.kill('SIGTERM');
    await new Promise((r) => (server.exitCode !== null ? r(null) : server.once('exit', r)));
    rmSync(dir, { recursive: true, force: true });
  }
}

async function connect(address: string, server: ChildProcess): Promise<Client> {
  for (let tries = 0; ; tries++) {
    if (server.exitCode !== null) throw new Error(`the dev server exited with ${server.exitCode}`);
    try {
      const connection = await Connection.connect({ address, connectTimeout: 1000 });
      const client = new Client({ connection, namespace: 'default' });
      await client.workflow.count(); // the namespace answers
      return client;
    } catch (e) {
      if (tries > 60) throw e;
      await sleep(500);
    }
  }
}

function report(results: Figures[]): string {
  const lines = [
    `$ ${command}`,
    `${scheduleCount} schedules due at the same minute, nobody polling their workflows: when did the dev server start them?`,
    '',
  ];
  for (const r of results) {
    lines.push(
      `${r.variant.padEnd(9)} first ${r.firstS.toFixed(1)} s, median ${r.medianS.toFixed(1)} s, p90 ${r.p90S.toFixed(1)} s, last ${r.lastS.toFixed(1)} s after the slot; ` +
        `scheduler workflow tasks timed out on the sticky queue: ${r.stickyTimeouts}`,
    );
    lines.push(
      `          starts per 10 s after the slot: ${Object.entries(r.per10s)
        .map(([k, v]) => `${k}s ${v}`)
        .join(', ')}`,
    );
  }
  return `${lines.join('\n')}\n`;
}

main().catch((e) => {
  process.stderr.write(`${e instanceof Error ? e.stack : String(e)}\n`);
  process.exit(1);
});
