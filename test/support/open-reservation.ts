import type pg from 'pg';
import { reserveBudget, type ReserveDecision } from '../../src/budgets/reserve';
import { worstCaseOf } from '../../src/budgets/worst-case';
import type { SimulateProfile } from '../../src/models/simulate-profile';

/**
 * Another run's reservation of its worst case (a gpt-4o-mini chat and a text-embedding-3-small embedding of this
 * prompt), left open under `runId` until the test releases it (releaseReservations): what a run beside it waits for.
 */
export async function openReservationOfOneRun(
  pool: pg.Pool,
  userId: string,
  runId: string,
  run: { prompt: string; maxOutputTokens: number; simulate?: SimulateProfile },
): Promise<ReserveDecision> {
  const planned = worstCaseOf(run);
  return reserveBudget(pool, {
    userId,
    runId,
    workflowId: runId,
    mayDowngrade: true,
    expirySeconds: 600,
    calls: [
      { step: 'chat', attempt: 1, kind: 'chat', model: 'openai/gpt-4o-mini', worstCase: planned.chat },
      { step: 'embed', attempt: 1, kind: 'embedding', model: 'openai/text-embedding-3-small', worstCase: planned.embedding },
    ],
  });
}
