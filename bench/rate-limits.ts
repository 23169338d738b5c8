/**
 * Provider rate limits shared by all workers (issue 25 §4): --slots runs due in one minute, on --workers worker
 * processes' worth of workers, against the fake OpenAI server enforcing --rpm requests and --tpm tokens per minute per
 * model over a sliding minute, as OpenAI does. cronledger is given the same limits (`cronledger limits apply`). Goal:
 * every run completes, with 429 answers at most 2 % of the calls. Prints the drain time, the 429s and the waits.
 * A private stack (dev server and PostgreSQL) in a temp dir, removed at the end.
 *
 *   node --import tsx bench/rate-limits.ts [--slots 300] [--rpm 60] [--tpm 200000] [--workers 2]
 */
import { NativeConnection, bundleWorkflowCode } from '@temporalio/worker';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectClient } from '../src/client';
import { createPool } from '../src/db/pool';
import { recordTaskVersions } from '../src/db/task-versions';
import { startStack, stopStack } from '../src/dev/stack';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { createOpenAIProvider } from '../src/models/openai-provider';
import { applyRateLimits, rateLimitStatus } from '../src/ratelimits/rate-limits-store';
import { runInputOf, taskFingerprint } from '../src/schedules/task-schedule';
import { taskSchema } from '../src/tasks/tasks-file';
import { createCronledgerWorker, workflowsPath } from '../src/worker-setup';
import { scheduledRun } from '../src/workflows/scheduled-run';
import { startFakeOpenAI } from '../test/support/fake-openai';
import { benchArgs, numberOption } from './lib/args';

const { values, command } = benchArgs('bench/rate-limits.ts', {
  slots: { type: 'string', default: '300' },
  rpm: { type: 'string', default: '60' },
  tpm: { type: 'string', default: '200000' },
  workers: { type: 'string', default: '2' },
});
const slots = numberOption('slots', values.slots);
const rpm = numberOption('rpm', values.rpm);
const tpm = numberOption('tpm', values.tpm);
const workerCount = numberOption('workers', values.workers);
const log = (line: string): void => void process.stderr.write(`${line}\n`);
const MODELS = { chat: 'openai/gpt-4o-mini', embedding: 'openai/text-embedding-3-small' };

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'cronledger-rate-limits-'));
  const fake = await startFakeOpenAI();
  for (const model of Object.values(MODELS))
    fake.setRateLimit(model.slice('openai/'.length), { requestsPerMinute: rpm, tokensPerMinute: tpm });
  try {
    const { stack } = await startStack({ dataDir: dir, workers: 0, admin: false, log });
    const pool = createPool(stack.postgres.databaseUrl, 20);
    await applyPrices(pool, loadPricesFile('prices/standard.json'), 'bench');
    await applyRateLimits(
      pool,
      Object.values(MODELS).map((model) => ({ model, requestsPerMinute: rpm, tokensPerMinute: tpm })),
    );
    const client = await connectClient({ temporalAddress: stack.temporal.address, namespace: stack.namespace });
    const workflowBundle = await bundleWorkflowCode({
      workflowsPath,
      logger: { trace() {}, debug() {}, info() {}, warn() {}, error() {} } as never,
    });
    const taskQueue = 'rate-limits';
    const provider = createOpenAIProvider({ OPENAI_BASE_URL: fake.baseURL, OPENAI_API_KEY: 'sk-bench-fake' });
    const connections = await Promise.all(
      Array.from({ length: workerCount }, () => NativeConnection.connect({ address: stack.temporal.address })),
    );
    const workers = await Promise.all(
      connections.map((connection, i) =>
        createCronledgerWorker({
          connection,
          namespace: stack.namespace,
          taskQueue,
          workflowBundle,
          deps: { pool, provider, workerId: `bench-${i}` },
        }),
      ),
    );
    const tasks = Array.from({ length: slots }, (_, i) =>
      taskSchema.parse({
        id: `limited-${i}`,
        cron: '0 9 * * *',
        userId: 'u1',
        input: 'Summarise the day.',
        model: MODELS.chat,
        maxOutputTokens: 500,
      }),
    );
    const fingerprints = tasks.map((t) => taskFingerprint(t, taskQueue));
    await recordTaskVersions(
      pool,
      tasks.map((task, i) => ({ taskId: task.id, fingerprint: fingerprints[i], definition: task })),
    );

    const started = Date.now();
    const statuses = await Promise.all(
      workers.map((w, i) =>
        i === 0
          ? w.runUntil(async () => {
              const handles = await Promise.all(
                tasks.map((t, n) =>
                  client.workflow.start(scheduledRun, {
                    workflowId: `cron-${t.id}-2026-11-02T09:00:00Z`,
                    taskQueue,
                    args: [runInputOf(t, fingerprints[n])],
                  }),
                ),
              );
              const results = await Promise.all(handles.map((h) => h.result()));
              for (const other of workers.slice(1)) other.shutdown();
              return results.map((r) => r.status);
            })
          : w.run().then(() => []),
      ),
    );
    const drained = (Date.now() - started) / 1000;
    const completed = statuses.flat().filter((s) => s === 'completed').length;
    const calls = fake.requests.filter((r) => r.status === 200).length;
    const throttled = fake.rateLimitedAnswers();
    const share = calls + throttled === 0 ? 0 : (throttled * 100) / (calls + throttled);
    const waits = await rateLimitStatus(pool);
    await Promise.all(connections.map((c) => c.close()));
    await client.connection.close();
    await pool.end();
    const lines = [
      `${slots} runs due at once, ${workerCount} workers; the fake OpenAI server and cronledger both at ${rpm} requests and ${tpm} tokens a minute per model`,
      `  completed ${completed} of ${slots} in ${drained.toFixed(1)} s (the limit alone allows ${slots} calls per model in ${((slots * 66) / rpm).toFixed(0)} s at 66 s a minute's limit)`,
      `  429 answers: ${throttled} of ${calls + throttled} calls (${share.toFixed(2)} %; goal at most 2 %)`,
      ...waits.map(
        (w) => `  ${w.model}: ${w.admitted} admitted, ${w.waited} waited, ${(Number(w.waitedMs) / 1000).toFixed(0)} s waited in all`,
      ),
      '',
      `  ${command}`,
    ];
    console.log(lines.join('\n'));
  } finally {
    await fake.close();
    await stopStack(dir);
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
