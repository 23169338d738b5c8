import { afterAll, beforeAll, expect, it } from 'vitest';
import { formatFigures } from '../support/chaos-figures';
import type { ChaosEnv } from './chaos-env';
import { createFaultContext } from './fault-context';
import { runProviderOutage } from './outages';

/** A provider outage during a burst, short form (bench/chaos.ts runs 3 minutes): every call answered 503 for 45 s. */
let env: ChaosEnv;
let close: () => Promise<void>;

beforeAll(async () => {
  ({ env, close } = await createFaultContext(import.meta.url));
});

afterAll(async () => close?.());

it('with the provider answering 503 for 45 s mid-burst (longer than five quick retries), every slot completes afterwards', async () => {
  const slots = 20;
  const r = await runProviderOutage(env, { slots, outageMs: 45_000 });
  process.stdout.write(`${formatFigures(r.figures)}\n`);

  expect(Number(r.figures.extra['requests answered 503'])).toBeGreaterThan(0); // the outage hit calls
  expect(r.failedSlots).toEqual([]);
  expect(r.figures.completed).toBe(slots);
  expect(r.figures.duplicates).toBe(0);
  expect(r.figures.unbookedUnexplained).toBe(0);
  expect(r.figures.ledgerRowsNotBilled).toBe(0);
  expect(r.figures.billed).toBe(2 * slots); // a 503 is not billed; each step billed once
  expect(r.figures.ledgerRows).toBe(2 * slots);
}, 600_000);
