import { formatScaled, LEDGER_SCALE, parseUsd, toAttoUsd } from '../money';

/** `default` under 80 % of the limit, `cheap` from 80 %, `blocked` from 100 % (of spent + open reservations). */
export type Tier = 'default' | 'cheap' | 'blocked';

export const CHEAP_FROM_PERCENT = 80n;
export const BLOCKED_FROM_PERCENT = 100n;

/** Exact decimal string → integer units of 10^-18 USD, so thresholds compare exactly (exactly 80 % is cheap). */
export const atto = (usd: string): bigint => toAttoUsd(parseUsd(usd));
export const usdOf = (attoUsd: bigint): string => formatScaled(attoUsd, LEDGER_SCALE);

/** The tier for what is used (spent + reserved) against a limit; no limit is always `default`. */
export function tierFor(usedAtto: bigint, limitAtto: bigint | null): Tier {
  if (limitAtto === null) return 'default';
  if (usedAtto * 100n >= limitAtto * BLOCKED_FROM_PERCENT) return 'blocked';
  if (usedAtto * 100n >= limitAtto * CHEAP_FROM_PERCENT) return 'cheap';
  return 'default';
}
