import { afterAll, beforeAll, expect, it } from 'vitest';
import { formatFigures } from '../support/chaos-figures';
import type { ChaosEnv } from './chaos-env';
import { runClaimRace } from './claim-race';
import { createFaultContext } from './fault-context';

/** R4: the claim race, with the racers held at a barrier in PostgreSQL until every one of them is waiting there. */
let env: ChaosEnv;
let close: () => Promise<void>;

beforeAll(async () => {
  ({ env, close } = await createFaultContext(import.meta.url));
});

afterAll(async () => close?.());

it('R4: three executions of one slot under different workflow IDs, in three processes, claim at the same instant: exactly one runs', async () => {
  const racers = 3;
  const r = await runClaimRace(env, { racers });
  process.stdout.write(`${formatFigures(r.figures)}\n  met at the barrier: ${r.metAtBarrier.join(', ')}\n`);

  expect(r.metAtBarrier).toHaveLength(racers); // the claims really met: all waiting on the lock at once, from distinct processes
  expect(r.outcomes.map((o) => o.status).sort()).toEqual(['completed', 'duplicate', 'duplicate']);
  expect(r.claimOwners).toBe(1);
  expect(r.figures.completed).toBe(1);
  expect(r.figures.stoppedByClaim).toBe(racers - 1);
  expect(r.figures.duplicates).toBe(0);
  expect(r.figures.billed).toBe(2); // one chat and one embedding, for the one claimer only
  expect(r.figures.ledgerRows).toBe(2);
  expect(r.figures.unbookedUnexplained).toBe(0);
}, 300_000);
