import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeUnbooked, formatFigures } from '../support/chaos-figures';
import type { ChaosEnv } from './chaos-env';
import { createFaultContext } from './fault-context';
import { reconcileWithBill } from './bill-reconcile';
import { runWorkerKills } from './worker-kills';

/** R1, short form (bench/chaos.ts runs the long one): real worker processes SIGKILLed at random during a backfill. */
let env: ChaosEnv;
let close: () => Promise<void>;

beforeAll(async () => {
  ({ env, close } = await createFaultContext(import.meta.url));
});

afterAll(async () => close?.());

it('R1: with a random worker SIGKILLed every few seconds, every slot completes once and every billed call is booked or lost to a kill', async () => {
  const slots = 40;
  const r = await runWorkerKills(env, { slots });
  process.stdout.write(`${formatFigures(r.figures)}\n`);

  expect(r.kills.length).toBeGreaterThanOrEqual(3); // else the scenario tested nothing
  expect(r.killsWithCallsInFlight).toBeGreaterThanOrEqual(1);
  expect(r.figures.unbookedExplained).toBeGreaterThanOrEqual(1); // a worker that died mid-call lost that answer
  expect(r.failedSlots).toEqual([]);
  expect(r.executed).toBe(slots);
  expect(r.figures.completed).toBe(slots);
  expect(r.figures.duplicates).toBe(0);
  expect(r.figures.stoppedByClaim).toBe(0);
  expect(r.figures.ledgerRowsNotBilled).toBe(0);
  expect(r.figures.billed).toBeGreaterThanOrEqual(2 * slots);
  const lost = r.unbooked.filter((u) => !u.kill).map((u) => describeUnbooked(u, r.kills));
  expect(lost, 'billed requests with no ledger row and no kill to explain them').toEqual([]);
  expect(r.figures.billed).toBe(r.figures.ledgerRows + r.figures.unbookedExplained);

  // The one window a worker can't close is closed by the provider's bill: reconciling against the fake's own reports
  // books exactly the lost answers' tokens and cost, and the ledger then equals the bill to the last digit.
  const bill = await reconcileWithBill(env, { startedAt: r.startedAt, billed: r.billed, unbooked: r.unbooked });
  process.stdout.write(
    `  reconcile openai: ${bill.bookedEntries} entries booked, ${bill.bookedTokens} tokens, ${bill.bookedUsd} USD ` +
      `(lost answers: ${bill.lostTokens} tokens, ${bill.lostUsd} USD); ledger ${bill.ledgerUsd} USD = bill ${bill.billUsd} USD\n`,
  );
  expect(bill.bookedTokens).toBe(bill.lostTokens);
  expect(bill.bookedUsd).toBe(bill.lostUsd);
  expect(bill.ledgerUsd).toBe(bill.billUsd);
}, 900_000);
