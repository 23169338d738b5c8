import { calculator, halfEven } from 'dinero.js/bigint';
import { formatScaled, LEDGER_SCALE, parseUsd, toAttoUsd, type Money } from '../money';

/**
 * Ratios of exact money. Division is the one place a report has to round: quotients are computed on integers
 * (amounts in 10^-18 USD, as BigInt) with Dinero's half-even divide on its bigint calculator, so the result is the
 * exact quotient rounded half-even at the last digit kept. A zero divisor gives 0: an empty month reports zeros.
 */
export const RATIO_ROUNDING =
  'quotients are exact BigInt divisions rounded half-even: USD per run and per user at 18 decimals, ' +
  'completed runs per dollar at 6 decimals; a zero divisor (no runs, no users, no spend) gives 0';

/** Completed runs per dollar are given to 6 decimals. */
export const RUNS_PER_DOLLAR_SCALE = 6n;

export function divideHalfEven(numerator: bigint, denominator: bigint): bigint {
  if (denominator === 0n) return 0n;
  return halfEven(numerator, denominator, calculator);
}

/** money / count, as an exact decimal string at the ledger scale (e.g. cost per completed run). */
export function moneyPer(total: Money, count: bigint): string {
  return formatScaled(divideHalfEven(toAttoUsd(total), count), LEDGER_SCALE);
}

/**
 * count / money: how many of something one dollar buys, at `scale` decimals (6 in reports; the admin page shows 1).
 * count / (atto / 10^18) = count·10^18 / atto, scaled by 10^scale before dividing, so the exact quotient is rounded
 * once, half-even, at the digit shown. Nothing is bought with no spend, and spend at or below zero (credits never
 * enter the spend) gives 0 rather than a negative or infinite ratio.
 */
export function countPerDollar(count: bigint, total: Money, scale = RUNS_PER_DOLLAR_SCALE): string {
  const atto = toAttoUsd(total);
  if (atto <= 0n) return formatScaled(0n, scale);
  return formatScaled(divideHalfEven(count * 10n ** LEDGER_SCALE * 10n ** scale, atto), scale);
}

/** part / whole in basis points (1/100 of a percent), half-even; a zero whole gives 0 like every ratio here. */
export const basisPoints = (part: bigint, whole: bigint): bigint => divideHalfEven(part * 10_000n, whole);

/** Compares exact decimal strings (descending helper for sorting by cost). */
export const compareUsd = (a: string, b: string): number => {
  const x = toAttoUsd(parseUsd(a));
  const y = toAttoUsd(parseUsd(b));
  return x < y ? -1 : x > y ? 1 : 0;
};
