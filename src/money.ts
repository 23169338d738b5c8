import { add, dinero, halfEven, multiply, toSnapshot, transformScale, USD, type Dinero } from 'dinero.js/bigint';
import { UserError } from './errors';

/**
 * Exact USD money on Dinero's bigint calculator. Nothing here ever touches a JS number or a float:
 * decimal strings come in (prices files, SQL numeric, CLI flags), decimal strings go out (JSON, CSV, SQL).
 */
export type Money = Dinero<bigint>;

/** Fractional digits of usage_ledger.cost_usd (numeric(38,18)); every per-token price in the table is exact at this scale. */
export const LEDGER_SCALE = 18n;
/** Total digits of usage_ledger.cost_usd: what is not fraction is at most 20 digits of whole dollars. */
export const LEDGER_PRECISION = 38n;
/** Fractional digits people see. Rounding happens only here, half-even. */
export const DISPLAY_SCALE = 6n;

const DECIMAL = /^(-)?(\d+)(?:\.(\d+))?$/;

export const zero = (): Money => dinero({ amount: 0n, currency: USD, scale: LEDGER_SCALE });

/** Parses an exact decimal string such as "0.15" or "-12.000000000000000001". */
export function parseUsd(text: string, what = 'amount'): Money {
  const m = DECIMAL.exec(text.trim());
  if (!m) throw new UserError(`${what} ${JSON.stringify(text)} is not a decimal number; write it like 0.15 or -2.50`);
  const [, sign, whole, frac = ''] = m;
  const wholeDigits = whole.replace(/^0+(?=\d)/, '').length;
  if (BigInt(wholeDigits) > LEDGER_PRECISION - LEDGER_SCALE) {
    throw new UserError(
      `${what} ${text} has ${wholeDigits} digits before the decimal point; at most ${LEDGER_PRECISION - LEDGER_SCALE} digits fit an exact ledger amount (numeric(38,18))`,
    );
  }
  if (BigInt(frac.length) > LEDGER_SCALE) {
    throw new UserError(`${what} ${text} has ${frac.length} fractional digits; at most ${LEDGER_SCALE} are kept exactly`);
  }
  const amount = BigInt(`${sign ?? ''}${whole}${frac}`);
  return dinero({ amount, currency: USD, scale: BigInt(frac.length) });
}

/** An amount that corrects something (an adjustment, a credit): exact like parseUsd, and never zero. */
export function parseCorrectionUsd(text: string, what = '--amount'): Money {
  const amount = parseUsd(text, what);
  if (toSnapshot(amount).amount === 0n) {
    throw new UserError(`${what} ${text} is zero, which corrects nothing; give the amount to add or take off, e.g. 0.25 or -0.0004`);
  }
  return amount;
}

/** Cost of `tokens` at a per-million price: price × tokens / 10^6, exact (the division only raises the scale). */
export function costAtPerMillion(pricePerMillion: Money, tokens: bigint): Money {
  return multiply(pricePerMillion, { amount: tokens, scale: 6n });
}

export function sumMoney(values: Iterable<Money>): Money {
  let total = zero();
  for (const v of values) total = add(total, v);
  return total;
}

/** Amount as integer units of 10^-18 USD: the plain BigInt form the exactness tests compare. */
export function toAttoUsd(value: Money): bigint {
  const { amount, scale } = toSnapshot(value);
  if (scale > LEDGER_SCALE) throw new Error(`money at scale ${scale} cannot be stored exactly at scale ${LEDGER_SCALE}`);
  return amount * 10n ** (LEDGER_SCALE - scale);
}

/** Exact decimal string at the ledger scale, the same text PostgreSQL prints for numeric(38,18). */
export function toExactString(value: Money): string {
  return formatScaled(toAttoUsd(value), LEDGER_SCALE);
}

/** `$0.000996`: rounded half-even to 6 decimals, for tables and prose only. Takes money or its exact decimal string. */
export function displayUsd(value: Money | string): string {
  const money = typeof value === 'string' ? parseUsd(value) : value;
  const { amount, scale } = toSnapshot(transformScale(money, DISPLAY_SCALE, halfEven));
  return formatUsd(amount, scale);
}

/** `$1.500000` / `-$1.500000` for an amount already at the scale it is shown with. */
export function formatUsd(amount: bigint, scale: bigint): string {
  const text = formatScaled(amount, scale);
  return text.startsWith('-') ? `-$${text.slice(1)}` : `$${text}`;
}

export function formatScaled(amount: bigint, scale: bigint): string {
  const negative = amount < 0n;
  const digits = (negative ? -amount : amount).toString().padStart(Number(scale) + 1, '0');
  const cut = digits.length - Number(scale);
  const text = scale > 0n ? `${digits.slice(0, cut)}.${digits.slice(cut)}` : digits;
  return negative ? `-${text}` : text;
}
