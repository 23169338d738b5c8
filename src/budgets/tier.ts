import { formatScaled, LEDGER_SCALE, parseUsd, toAttoUsd } from '../money';

/**
 * The budget tier of spent + open reservations against the limit: `default`, `cheap` (downgraded), `blocked`. The bands
 * (from what share of the limit each tier starts) are the database's: budget_bands and budget_tier (db/schema.sql).
 */
export type Tier = 'default' | 'cheap' | 'blocked';

/** Exact decimal string → integer units of 10^-18 USD, so amounts compare exactly. */
export const atto = (usd: string): bigint => toAttoUsd(parseUsd(usd));
export const usdOf = (attoUsd: bigint): string => formatScaled(attoUsd, LEDGER_SCALE);
