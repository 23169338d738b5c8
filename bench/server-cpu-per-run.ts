/**
 * The Temporal dev server's CPU per run, for two variants side by side: two private dev servers started as `dev up`
 * starts its own (temporalArgs: the same flags and dynamic config), each with a worker in this process running the bare
 * workflow (bench/bare-run-workflow.ts: scheduledRun's Temporal steps, activities that do nothing). Rounds alternate
 * between the two, so drift on the shared machine hits both alike; each round starts --runs workflows, 20 at a time,
 * and reads the server process's CPU time from /proc before and after. The first round of each warms up, unmeasured.
 *
 * The two differ by dynamic config (--a-config, --b-config KEY=JSON, repeatable, added to or replacing dev up's) or by
 * workflow (--a-workflow, --b-workflow NAME, an export of bench/bare-run-workflow.ts; bareRun by default).
 *
 *   node --import tsx bench/server-cpu-per-run.ts --a-config system.enableActivityEagerExecution=false [--runs 200] [--rounds 5]
 *
 * The worker's own CPU is in this process and not counted: the figure is the server's work per run.
 */
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { StackFile } from '../src/config';
import { freePorts } from '../src/dev/ports';
import { findTemporalCli } from '../src/dev/temporal-cli';
import { temporalArgs } from '../src/dev/temporal-server';
import { WORKER_TUNING } from '../src/worker-setup';
import { createBareActivities } from './bare-worker';

const arg = (name: string, fallback: string): string => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && process.argv[i + 1] ? process.argv[i + 1] : fallback;
};
const configs = (name: string): string[] =>
  process.argv.flatMap((a, i) => (a === `--${name}` && process.argv[i + 1] ? [process.argv[i + 1]] : []));
const RUNS = Number(arg('runs', '200'));
const ROUNDS = Number(arg('rounds', '5'));
const CONCURRENCY = 20;
const command = `node --import tsx bench/server-cpu-per-run.ts ${process.argv.slice(2).join(' ')}`.trim();
const log = (line: string): void => void process.stderr.write(`${new Date().toISOString()} ${line}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const TICK_MS = 10; // /proc/<pid>/stat counts CPU in clock ticks of 1/100 s

interface Variant {
  name: string;
  workflow: string;
  config: string[];
}

interface Server {
  variant: Variant;
  client: Client;
  cpuMs(): number;
  close(): Promise<void>;
}

/** --x-config KEY=JSON as start-dev's --dynamic-config-value flags; later ones win over dev up's own, as the server reads them. */
const configArgs = (config: string[]): string[] =>
  config.flatMap((kv) => {
    const [key, ...json] = kv.split('=');
    return ['--dynamic-config-value', `${key}=${json.join('=')}`];
  });

/** Every --x-config value must be JSON: checked before any server starts, so a typo names itself and starts nothing. */
function checkConfigs(variants: Variant[]): void {
  for (const kv of variants.flatMap((v) => v.config)) {
    const [key, ...json] = kv.split('=');
    try {
      JSON.parse(json.join('='));
    } catch {
      throw new Error(`--a-config/--b-config ${JSON.stringify(kv)}: the value of ${key} is not JSON (e.g. ${key}=true)`);
    }
  }
}

async function startServer(variant: Variant): Promise<Server> {
  const dir = mkdtempSync(join(tmpdir(), 'cronledger-server-cpu-'));
  const [port, uiPort] = await freePorts(2);
  const base = temporalArgs({ dbFile: join(dir, 'temporal.db'), port, uiPort } as StackFile['temporal'], ['default']);
  // dev up's values for the keys given are dropped, so that each key is set once
  const keys = new Set(variant.config.map((kv) => kv.split('=')[0]));
  const kept = base.filter((a, i) => {
    const value = a === '--dynamic-config-value' ? base[i + 1] : base[i - 1] === '--dynamic-config-value' ? a : undefined;
    return value === undefined || !keys.has(value.split('=')[0]);
  });
  const args = [...kept, ...configArgs(variant.config)];
  log(`${variant.name}: temporal ${args.join(' ')}`);
  const server: ChildProcess = spawn(findTemporalCli()!.path, args, { stdio: 'ignore' });
  const address = `127.0.0.1:${port}`;
  let client: Client | undefined;
  for (let tries = 0; !client; tries++) {
    client = await Connection.connect({ address })
      .then(async (connection) => {
        const c = new Client({ connection });
        await c.workflow.count();
        return c;
      })
      .catch(async (e: unknown) => {
        if (tries > 120 || server.exitCode !== null) throw e;
        await sleep(500);
        return undefined;
      });
  }
  const connection = await NativeConnection.connect({ address });
  const worker = await Worker.create({
    ...WORKER_TUNING,
    connection,
    namespace: 'default',
    taskQueue: 'bare',
    workflowsPath: fileURLToPath(new URL('./bare-run-workflow.ts', import.meta.url)),
    activities: createBareActivities(0),
  });
  const running = worker.run();
  return {
    variant,
    client,
    cpuMs() {
      const fields = readFileSync(`/proc/${server.pid}/stat`, 'utf8').split(') ')[1].split(' ');
      return (Number(fields[11]) + Number(fields[12])) * TICK_MS; // utime + stime
    },
    async close() {
      worker.shutdown();
      await running;
      await connection.close();
      await client.connection.close();
      server.kill('SIGTERM');
      await new Promise((r) => (server.exitCode !== null ? r(null) : server.once('exit', r)));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** RUNS workflows, CONCURRENCY at a time, each awaited to its result: the server's CPU milliseconds per run, and wall ms. */
async function round(s: Server, label: string): Promise<{ cpu: number; wall: number }> {
  const cpu0 = s.cpuMs();
  const wall0 = Date.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let i = next++; i < RUNS; i = next++)
        await s.client.workflow.execute(s.variant.workflow, { taskQueue: 'bare', workflowId: `${label}-${i}` });
    }),
  );
  return { cpu: (s.cpuMs() - cpu0) / RUNS, wall: (Date.now() - wall0) / RUNS };
}

async function main(): Promise<void> {
  const a: Variant = { name: 'A', workflow: arg('a-workflow', 'bareRun'), config: configs('a-config') };
  const b: Variant = { name: 'B', workflow: arg('b-workflow', 'bareRun'), config: configs('b-config') };
  checkConfigs([a, b]);
  const servers = [await startServer(a), await startServer(b)];
  const cpu: number[][] = [[], []];
  const wall: number[][] = [[], []];
  try {
    for (let r = 0; r <= ROUNDS; r++) {
      for (const [k, s] of servers.entries()) {
        const figures = await round(s, `round-${r}`);
        log(`${s.variant.name} round ${r}${r === 0 ? ' (warm-up)' : ''}: ${figures.cpu.toFixed(1)} ms of server CPU a run`);
        if (r === 0) continue;
        cpu[k].push(figures.cpu);
        wall[k].push(figures.wall);
      }
    }
  } finally {
    for (const s of servers) await s.close();
  }
  const mean = (xs: number[]) => xs.reduce((x, y) => x + y, 0) / xs.length;
  const describe = (v: Variant) => `${v.workflow}${v.config.length ? `, ${v.config.join(', ')}` : ', dev up config'}`;
  const lines = [
    `$ ${command}`,
    `two dev servers, ${ROUNDS} rounds alternating, ${RUNS} runs a round, ${CONCURRENCY} at a time`,
    ...servers.map(
      (s, k) =>
        `${s.variant.name} (${describe(s.variant)}): server CPU ${mean(cpu[k]).toFixed(1)} ms a run (rounds ${cpu[k].map((x) => x.toFixed(1)).join(', ')}), wall ${mean(wall[k]).toFixed(1)} ms a run`,
    ),
    `B / A server CPU a run: ${(mean(cpu[1]) / mean(cpu[0])).toFixed(2)}; B lower in ${cpu[1].filter((x, i) => x < cpu[0][i]).length} of ${ROUNDS} rounds`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
