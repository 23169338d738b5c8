import { afterAll, beforeAll, expect, it } from 'vitest';
import { formatFigures } from '../support/chaos-figures';
import type { TestContext } from '../support/context';
import type { ChaosEnv } from './chaos-env';
import { createFaultContext } from './fault-context';
import { runRetryFailed } from './retry-failed';

let env: ChaosEnv;
let ctx: TestContext;
let close: () => Promise<void>;

beforeAll(async () => {
  ({ env, ctx, close } = await createFaultContext(import.meta.url));
});

afterAll(async () => close?.());

it('a slot that failed after a billed call, retried with backfill --retry-failed: one completed run, both executions booked', async () => {
  const r = await runRetryFailed(env, ctx.env);
  process.stdout.write(`${formatFigures(r.figures)}\n`);

  expect(r.first.code, r.first.stdout + r.first.stderr).not.toBe(0); // the failed slot makes the backfill fail
  expect(r.retry.code, r.retry.stdout + r.retry.stderr).toBe(0);
  expect(r.executions).toEqual(['FAILED', 'COMPLETED']); // side by side under the slot's one workflow ID
  expect(r.figures.completed).toBe(1);
  expect(r.figures.billed).toBe(3); // the first execution's chat, then the retry's chat and embedding
  expect(r.figures.ledgerRows).toBe(3);
  expect(r.figures.unbookedUnexplained).toBe(0);
  expect(r.figures.ledgerRowsNotBilled).toBe(0);
  expect(r.ledgerExecutions).toBe(2);
}, 300_000);
