import { UserError } from '../errors';
import { numberText, shiftDecimal } from '../json-number-text';

/**
 * What the providers' usage and cost reports say, one row per key and source: day (UTC), the provider's model name,
 * the token class (or `line_item` for a cost line no key can hold: model is then the line's text), the tier, the
 * project (OpenAI) or workspace (Anthropic) and API key, and either tokens (a usage report) or USD (a cost report),
 * both as exact decimal strings. migrations/034_reconciliation.sql matches them against the ledger.
 */
export type Provider = 'openai' | 'anthropic';
export const PROVIDERS: readonly Provider[] = ['openai', 'anthropic'];

export type TokenClass = 'input' | 'cached_input' | 'cache_write_5m' | 'cache_write_1h' | 'output' | 'embedding' | 'line_item';

export interface ProviderRow {
  day: string;
  model: string;
  tokenClass: TokenClass;
  serviceTier: string;
  projectId: string | null;
  apiKeyId: string | null;
  tokens: string | null;
  costUsd: string | null;
}

/** The tier a price is looked up under, as SQL's price_tier() names it: no tier or "default" is the standard one. */
export const priceTierOf = (tier: unknown): string => (typeof tier !== 'string' || tier === '' || tier === 'default' ? 'standard' : tier);

/** A page's field that must be a token count (a whole number, kept as text), or a UserError naming the page. */
export function tokenCount(value: unknown, field: string, where: string): string {
  if (value === null || value === undefined) return '0';
  const text = numberText(value);
  if (text === null || !/^\d+$/.test(text))
    throw new UserError(`${where}: ${field} is ${describe(value)}, not a token count (a whole number)`);
  return text.replace(/^0+(?=\d)/, '');
}

/** A JSON number's decimal text times 10^places as a plain decimal (a cost in USD), or a UserError naming the page. */
export function decimalOf(value: unknown, places: number, field: string, where: string): string {
  const text = numberText(value) ?? (typeof value === 'string' ? value : null);
  const decimal = text === null ? null : shiftDecimal(text, places);
  if (decimal === null) throw new UserError(`${where}: ${field} is ${describe(value)}, not a decimal amount`);
  const [whole, fraction = ''] = decimal.replace('-', '').split('.');
  if (fraction.length > 18 || whole.length > 20) {
    throw new UserError(`${where}: ${field} ${describe(value)} is ${decimal} USD, which the ledger cannot hold exactly (numeric(38,18))`);
  }
  return decimal;
}

/** A provider's string field (a model, a project), null when absent. */
export function stringOrNull(value: unknown, field: string, where: string): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value !== 'string') throw new UserError(`${where}: ${field} is ${describe(value)}, not a string`);
  return value;
}

export const dayOfUnixSeconds = (seconds: unknown, where: string): string => {
  const text = numberText(seconds);
  if (text === null || !/^\d+$/.test(text))
    throw new UserError(`${where}: a bucket's start_time is ${describe(seconds)}, not Unix seconds`);
  return new Date(Number(text) * 1000).toISOString().slice(0, 10);
};

export const dayOfTimestamp = (at: unknown, where: string): string => {
  const ms = typeof at === 'string' ? Date.parse(at) : NaN;
  if (Number.isNaN(ms)) throw new UserError(`${where}: a bucket's starting_at is ${describe(at)}, not an RFC 3339 time`);
  return new Date(ms).toISOString().slice(0, 10);
};

function describe(value: unknown): string {
  const text = numberText(value);
  return text ?? JSON.stringify(value) ?? String(value);
}

/** A page as the APIs send it: {data: [bucket...], has_more, next_page}. */
export interface Page {
  data: Record<string, unknown>[];
  has_more?: boolean;
  next_page?: string | null;
}

/** The page's buckets, or a UserError saying the text is not such a page. */
export function bucketsOf(page: unknown, where: string): Record<string, unknown>[] {
  const data = (page as Page | null)?.data;
  if (!page || typeof page !== 'object' || !Array.isArray(data)) {
    throw new UserError(`${where} is not a page of a usage or cost report (an object with a "data" array of buckets)`);
  }
  return data;
}

/** A bucket's results (OpenAI writes `results`, as does Anthropic; OpenAI's reference also shows `result`). */
export function resultsOf(bucket: Record<string, unknown>, where: string): Record<string, unknown>[] {
  const results = bucket.results ?? bucket.result;
  if (!Array.isArray(results)) throw new UserError(`${where}: a bucket has no "results" array`);
  return results as Record<string, unknown>[];
}
