import { expect, it } from 'vitest';
import { budgetWaitMaxSeconds, DEFAULT_BUDGET_WAIT_MAX_SECONDS } from '../../src/config';

it('CRONLEDGER_BUDGET_WAIT_MAX: seconds or a unit, 10 minutes when unset, and a malformed value named with the fix', () => {
  const of = (value?: string) => budgetWaitMaxSeconds(value === undefined ? {} : { CRONLEDGER_BUDGET_WAIT_MAX: value });
  expect([of(), of(''), of('90'), of('90s'), of('10m'), of('1h'), of('0')]).toEqual([
    DEFAULT_BUDGET_WAIT_MAX_SECONDS,
    600,
    90,
    90,
    600,
    3600,
    0,
  ]);
  expect(DEFAULT_BUDGET_WAIT_MAX_SECONDS).toBe(600);
  for (const bad of ['10 minutes', '-5', '1.5m', '5d'])
    expect(() => of(bad)).toThrow(/CRONLEDGER_BUDGET_WAIT_MAX=.*e\.g\. "600", "90s" or "10m"/);
});
