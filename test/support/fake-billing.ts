import type { ServerResponse } from 'node:http';

/**
 * What the fake providers' admin endpoints share: daily buckets paged a few at a time (a small page size, so a
 * reconciliation must follow has_more/next_page), exact USD from token counts and per-million rates (BigInt, never a
 * float), and JSON whose numbers are written with their exact decimal text, as a provider's are.
 */

export const DAY_MS = 86_400_000;

/** The UTC days [start, end) as YYYY-MM-DD, one per bucket. */
export function daysOf(startMs: number, endMs: number): string[] {
  const days: string[] = [];
  for (let t = Math.floor(startMs / DAY_MS) * DAY_MS; t < endMs; t += DAY_MS) days.push(new Date(t).toISOString().slice(0, 10));
  return days;
}

export const dayOf = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

/** The buckets of one page: at most `limit` from the cursor on, and the next cursor (null after the last). */
export function pageOf<T>(buckets: T[], limit: number, page: string | null): { buckets: T[]; next: string | null } {
  const from = page === null ? 0 : Number(Buffer.from(page, 'base64url').toString('utf8'));
  const to = from + Math.max(1, limit);
  return {
    buckets: buckets.slice(from, to),
    next: to < buckets.length ? Buffer.from(String(to), 'utf8').toString('base64url') : null,
  };
}

const ATTO = 10n ** 18n;

/** A decimal string (per-million rate or USD) as integer 10^-18 units. */
export function attoOf(text: string): bigint {
  const m = /^(\d+)(?:\.(\d{1,18}))?$/.exec(text);
  if (!m) throw new Error(`fake billing: ${text} is not a non-negative decimal with at most 18 places`);
  return BigInt(m[1]) * ATTO + BigInt((m[2] ?? '').padEnd(18, '0'));
}

/** tokens × per-million rate, exact, in 10^-18 USD (a rate of at most 12 decimals divides exactly). */
export const costAtto = (tokens: number, perMillion: string): bigint => (BigInt(tokens) * attoOf(perMillion)) / 1_000_000n;

/** Integer 10^-`scale` units as a plain decimal string without trailing zeros. */
export function decimalText(atto: bigint, scale = 18): string {
  const digits = atto.toString().padStart(scale + 1, '0');
  const whole = digits.slice(0, digits.length - scale);
  const fraction = digits.slice(digits.length - scale).replace(/0+$/, '');
  return fraction ? `${whole}.${fraction}` : whole;
}

const RAW = '\u0001raw:';
/** A value written into JSON as a bare number with exactly this text. */
export const rawNumber = (text: string): string => `${RAW}${text}`;

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body).replace(/"\\u0001raw:([^"]+)"/g, '$1');
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(text);
}

export interface BillingGroup {
  day: string;
  /** What the report groups by (model, project, line item...), as the report writes them. */
  fields: Record<string, unknown>;
  sums: Record<string, bigint>;
}

/** Sums per day and group, as a report aggregates its billed log. */
export function billingGroups(): {
  add(day: string, fields: Record<string, unknown>, sums: Record<string, bigint>): void;
  of(day: string): BillingGroup[];
} {
  const groups = new Map<string, BillingGroup>();
  return {
    add(day, fields, sums) {
      const key = JSON.stringify([day, fields]);
      const group = groups.get(key) ?? { day, fields, sums: {} };
      for (const [k, v] of Object.entries(sums)) group.sums[k] = (group.sums[k] ?? 0n) + v;
      groups.set(key, group);
    },
    of: (day) => [...groups.values()].filter((g) => g.day === day),
  };
}
