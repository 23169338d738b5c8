/**
 * The fault-injection suite in full (the CI runs short forms of the same scenarios, test/fault/*.test.ts): real
 * worker processes, the openai provider against the local fake OpenAI (which keeps its own log of billed requests),
 * and a private stack of its own, a Temporal dev server and a PostgreSQL cluster in a temp dir, because R2 kills the
 * one and R3 stops the other. Each scenario prints its figures; progress goes to stderr.
 *
 *   node --import tsx bench/chaos.ts [--only r4,r1,r3,outage,retry,r2] [--slots 300] [--burst 100]
 *        [--pg-outage 30] [--provider-outage 180] [--racers 6] [--tasks 5]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectClient } from '../src/client';
import { createPool } from '../src/db/pool';
import { findTemporalCli } from '../src/dev/temporal-cli';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import type { ChaosEnv } from '../test/fault/chaos-env';
import { runClaimRace } from '../test/fault/claim-race';
import { runPostgresOutage, runProviderOutage } from '../test/fault/outages';
import { runRetryFailed } from '../test/fault/retry-failed';
import { runTemporalRestart } from '../test/fault/temporal-restart';
import { runWorkerKills } from '../test/fault/worker-kills';
import { describeUnbooked, formatFigures, type ChaosFigures } from '../test/support/chaos-figures';
import { startFakeOpenAI } from '../test/support/fake-openai';
import { PrivatePostgres } from '../test/support/private-postgres';
import { TemporalProcess } from '../test/support/temporal-process';
import { writeWorkflowBundle } from '../test/support/worker-processes';
import { benchArgs, numberOption } from './lib/args';

const { values, command } = benchArgs('bench/chaos.ts', {
  only: { type: 'string', default: 'r4,r1,r3,outage,retry,r2' },
  slots: { type: 'string', default: '300' },
  burst: { type: 'string', default: '100' },
  'pg-outage': { type: 'string', default: '30' },
  'provider-outage': { type: 'string', default: '180' },
  racers: { type: 'string', default: '6' },
  tasks: { type: 'string', default: '5' },
});
const only = values.only.split(',');
const slots = numberOption('slots', values.slots);
const burst = numberOption('burst', values.burst);
const pgOutageS = numberOption('pg-outage', values['pg-outage']);
const providerOutageS = numberOption('provider-outage', values['provider-outage']);
const racers = numberOption('racers', values.racers);
const tasks = numberOption('tasks', values.tasks);

const log = (line: string): void => void process.stderr.write(`${new Date().toISOString()} ${line}\n`);

async function main(): Promise<void> {
  const cli = findTemporalCli();
  if (!cli)
    throw new Error(
      'no temporal binary: run ./scripts/test.sh (or `npx cronledger dev up`) once to build it, or set CRONLEDGER_TEMPORAL_CLI',
    );
  const dir = mkdtempSync(join(tmpdir(), 'cronledger-chaos-'));
  log(`private stack in ${dir}`);
  const postgres = await PrivatePostgres.create(dir);
  const server = await TemporalProcess.create({
    cli: cli.path,
    dbFilename: join(dir, 'temporal.db'),
    namespaces: [],
    logFile: join(dir, 'temporal.log'),
  });
  await server.start();
  const client = await connectClient({ temporalAddress: server.address, namespace: 'default' });
  const pool = createPool(postgres.databaseUrl);
  const operatorPool = createPool(postgres.operatorDatabaseUrl, 2);
  const fake = await startFakeOpenAI({ billedLogFile: join(dir, 'billed.jsonl') });
  const results: { figures: ChaosFigures; notes: string[] }[] = [];
  process.stdout.write(`$ ${command}\n\n`);
  try {
    await applyPrices(operatorPool, loadPricesFile('prices/standard.json'), 'bench');
    const env: ChaosEnv = {
      client,
      pool,
      operatorPool,
      temporalAddress: server.address,
      namespace: 'default',
      databaseUrl: postgres.databaseUrl,
      ownerDatabaseUrl: postgres.ownerDatabaseUrl,
      fake,
      bundlePath: await writeWorkflowBundle(dir),
      logDir: join(dir, 'logs'),
      log,
    };
    const report = (figures: ChaosFigures, notes: string[] = []) => {
      results.push({ figures, notes });
      process.stdout.write(`${formatFigures(figures)}\n${notes.map((n) => `  ${n}\n`).join('')}\n`);
    };

    if (only.includes('r4')) {
      log(`R4: ${racers} racers`);
      const r = await runClaimRace(env, { racers });
      report(r.figures, [
        `met at the barrier: ${r.metAtBarrier.length} of ${racers} (${r.metAtBarrier.join(', ')})`,
        `outcomes: ${r.outcomes.map((o) => o.status).join(', ')}`,
      ]);
    }
    if (only.includes('r1')) {
      log(`R1: ${slots} slots`);
      const r = await runWorkerKills(env, { slots });
      const lost = r.unbooked.filter((u) => !u.kill);
      report(r.figures, [
        ...(r.failedSlots.length ? [`slots not executed: ${r.failedSlots.join('; ')}`] : []),
        ...lost.map((u) => `UNEXPLAINED: ${describeUnbooked(u, r.kills)}`),
      ]);
    }
    if (only.includes('r3')) {
      log(`R3: PostgreSQL down ${pgOutageS} s during ${burst} slots`);
      const r = await runPostgresOutage(env, postgres, { slots: burst, outageMs: pgOutageS * 1000 });
      report(r.figures, r.failedSlots.length ? [`slots not executed: ${r.failedSlots.join('; ')}`] : []);
    }
    if (only.includes('outage')) {
      log(`provider outage ${providerOutageS} s during ${burst} slots`);
      const r = await runProviderOutage(env, { slots: burst, outageMs: providerOutageS * 1000 });
      report(r.figures, r.failedSlots.length ? [`slots not executed: ${r.failedSlots.join('; ')}`] : []);
    }
    if (only.includes('retry')) {
      log('retry a failed slot');
      const cliEnv = {
        ...process.env,
        TEMPORAL_ADDRESS: server.address,
        TEMPORAL_NAMESPACE: 'default',
        DATABASE_URL: postgres.databaseUrl,
        CRONLEDGER_DATA_DIR: join(dir, 'cli'),
      };
      const r = await runRetryFailed(env, cliEnv);
      report(r.figures, [`executions of the slot: ${r.executions.join(', ')}; executions in the ledger: ${r.ledgerExecutions}`]);
    }
    if (only.includes('r2')) {
      log(`R2: ${tasks} every-minute tasks, Temporal killed across 2 slots`);
      const r = await runTemporalRestart(env, server, { tasks, downSlots: 2 });
      report(r.figures, [
        ...r.gaps,
        ...r.missed.map((m) => `${m.workflowId}: ${m.status}, started ${(m.startedAfterRestartMs / 1000).toFixed(1)} s after the restart`),
      ]);
    }
  } finally {
    await fake.close();
    await client.connection.close();
    await pool.end();
    await operatorPool.end();
    await server.stop();
    await postgres.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
  process.stdout.write(`${results.length} scenario(s), measured ${new Date().toISOString().slice(0, 10)}\n`);
}

main().catch((err) => {
  process.stderr.write(`chaos bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
