/**
 * The bare workflow P1 (bench/fan-out.ts) compares scheduledRun against: the same Temporal steps as scheduledRun, in the
 * same order and with the same options, and activities that do nothing. What scheduledRun costs beyond it is cronledger's own work (PostgreSQL, the model
 * client, payloads).
 */
import { proxyActivities, proxyLocalActivities, upsertSearchAttributes } from '@temporalio/workflow';
import { LOCAL_BOOKKEEPING_OPTIONS } from '../../src/workflows/run-budget';
import { MODEL_CALL_OPTIONS } from '../../src/workflows/scheduled-run';
import type { createBareActivities } from './bare-worker';

type BareActivities = ReturnType<typeof createBareActivities>;

// scheduledRun's own activity options, so the two can't drift apart
const bookkeeping = proxyLocalActivities<BareActivities>(LOCAL_BOOKKEEPING_OPTIONS);
const modelCalls = proxyActivities<BareActivities>(MODEL_CALL_OPTIONS);

/** claim and reserve (one step), (Tier), chat + book, embedding + its booking with memory and complete (one step), nothing done. */
export async function bareRun(): Promise<string> {
  await bookkeeping.claimAndReserve();
  upsertSearchAttributes([{ key: { name: 'Tier', type: 'KEYWORD' }, value: 'default' }]);
  await modelCalls.call();
  await bookkeeping.book();
  await modelCalls.call();
  await bookkeeping.complete(); // bookUsageAndCompleteRun: the last booking, the memory and the claim's close, one step
  return 'completed';
}
