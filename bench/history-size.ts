/**
 * History bytes of one completed scheduledRun, as `temporal workflow show --output json | wc -c` counts them: once with
 * the offline mock model (a 16-number embedding) and once through the openai provider against the fake OpenAI server
 * answering a realistic embedding (--dimensions numbers, 1,536 as text-embedding-3-small gives). The goal (issue 23): the
 * second no larger than the first, and both at most 16 KB, because the embedding is stored by its step, not carried
 * through history. Each run gets a private stack (dev server and PostgreSQL, as `dev up` starts them) in a temp dir.
 *
 *   node --import tsx bench/history-size.ts [--dimensions 1536] [--out DIR]
 *
 * --out: also write each history there (mock.json, openai.json), as the CLI printed it.
 */
import { NativeConnection, bundleWorkflowCode } from '@temporalio/worker';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { connectClient } from '../src/client';
import { createPool } from '../src/db/pool';
import { startStack, stopStack } from '../src/dev/stack';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { MockProvider } from '../src/models/mock-provider';
import { createOpenAIProvider } from '../src/models/openai-provider';
import type { ModelProvider } from '../src/models/provider';
import { recordTaskVersions } from '../src/db/task-versions';
import { runInputOf, taskFingerprint } from '../src/schedules/task-schedule';
import { taskSchema } from '../src/tasks/tasks-file';
import { createCronledgerWorker, workflowsPath } from '../src/worker-setup';
import { scheduledRun } from '../src/workflows/scheduled-run';
import { startFakeOpenAI } from '../test/support/fake-openai';

const { values } = parseArgs({ options: { dimensions: { type: 'string', default: '1536' }, out: { type: 'string' } } });
const dimensions = Number(values.dimensions);
const command = `node --import tsx bench/history-size.ts --dimensions ${dimensions}`;
const log = (line: string): void => void process.stderr.write(`${line}\n`);

/** Numbers like a real embedding's: float32 values near ±1/sqrt(n), printed with all their digits (about 20 characters). */
export function realisticVector(n: number, seed = 1): number[] {
  let state = seed;
  const next = (): number => ((state = (state * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31) * 2 - 1;
  return Array.from({ length: n }, () => Math.fround(next() / Math.sqrt(n)));
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'cronledger-history-size-'));
  const fake = await startFakeOpenAI();
  const vector = realisticVector(dimensions);
  fake.setDefault('embeddings', { kind: 'ok', vector });
  try {
    const { stack } = await startStack({ dataDir: dir, workers: 0, admin: false, log });
    const pool = createPool(stack.postgres.databaseUrl);
    const operatorPool = createPool(stack.postgres.operatorDatabaseUrl ?? '', 2);
    await applyPrices(operatorPool, loadPricesFile('prices/standard.json'), 'bench');
    const client = await connectClient({ temporalAddress: stack.temporal.address, namespace: stack.namespace });
    const workflowBundle = await bundleWorkflowCode({
      workflowsPath,
      logger: { trace() {}, debug() {}, info() {}, warn() {}, error() {} } as never,
    });
    const variants: { name: string; file: string; provider: ModelProvider }[] = [
      { name: 'mock (16 numbers)', file: 'mock.json', provider: new MockProvider() },
      {
        name: `fake OpenAI (${dimensions} numbers)`,
        file: 'openai.json',
        provider: createOpenAIProvider({ OPENAI_BASE_URL: fake.baseURL, OPENAI_API_KEY: 'sk-bench-fake' }),
      },
    ];
    const rows: string[] = [];
    for (const [i, v] of variants.entries()) {
      const taskQueue = `history-size-${i}`;
      const connection = await NativeConnection.connect({ address: stack.temporal.address });
      const worker = await createCronledgerWorker({
        connection,
        namespace: stack.namespace,
        taskQueue,
        workflowBundle,
        deps: { pool, provider: v.provider, workerId: 'bench' },
      });
      const task = taskSchema.parse({ id: `size-${i}`, cron: '0 9 * * *', userId: 'u1', input: 'Summarise the day.' });
      const fingerprint = taskFingerprint(task, taskQueue);
      await recordTaskVersions(operatorPool, [{ taskId: task.id, fingerprint, definition: task }]);
      const handle = await worker.runUntil(async () => {
        const h = await client.workflow.start(scheduledRun, {
          workflowId: `cron-size-${i}-2026-11-02T09:00:00Z`,
          taskQueue,
          args: [runInputOf(task, fingerprint)],
        });
        const result = await h.result();
        if (result.status !== 'completed') throw new Error(`run ended ${result.status}`);
        return h;
      });
      await connection.close();
      const json = execFileSync(stack.temporal.cli, [
        'workflow',
        'show',
        '--workflow-id',
        handle.workflowId,
        '--run-id',
        handle.firstExecutionRunId,
        '--output',
        'json',
        '--address',
        stack.temporal.address,
        '--namespace',
        stack.namespace,
      ]);
      if (values.out) writeFileSync(join(values.out, v.file), json);
      const events = (JSON.parse(json.toString('utf8')) as { events: unknown[] }).events.length;
      rows.push(`${v.name.padEnd(28)} ${String(json.length).padStart(7)} bytes  ${events} events`);
    }
    await client.connection.close();
    await pool.end();
    await operatorPool.end();
    console.log(`History of one completed scheduledRun (temporal workflow show --output json | wc -c)\n${rows.join('\n')}\n\n  ${command}`);
  } finally {
    await fake.close();
    await stopStack(dir);
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
