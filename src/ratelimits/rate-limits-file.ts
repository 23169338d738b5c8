import { z } from 'zod';
import { UserError } from '../errors';
import { checkEntryCap, RATE_LIMITS_FILE, readInputFile } from '../input-file';

/**
 * `cronledger limits apply FILE`: the providers' rate limits per model, as the provider's limits page gives them:
 *   { "rateLimits": { "openai/gpt-4o-mini": { "requestsPerMinute": 500, "tokensPerMinute": 200000 } } }
 * Whole numbers (counts, never money); either limit may be left out, not both. The file is the whole set: a model
 * left out of it has no limit once it is applied.
 */
export interface RateLimit {
  model: string;
  requestsPerMinute: number | null;
  tokensPerMinute: number | null;
}

export const MAX_RATE_LIMITS = 10_000;
const MAX_REQUESTS_PER_MINUTE = 1_000_000_000;
const MAX_TOKENS_PER_MINUTE = 1_000_000_000_000;

const fileSchema = z.object({ rateLimits: z.record(z.string(), z.unknown()) }).strict();
const entrySchema = z.object({ requestsPerMinute: z.unknown().optional(), tokensPerMinute: z.unknown().optional() }).strict();

function perMinute(value: unknown, where: string, max: number): number | null {
  if (value === undefined) return null;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1 || value > max) {
    throw new UserError(
      `${where} ${JSON.stringify(value)} is not a whole number from 1 to ${max.toLocaleString('en-US')}: write the provider's limit, e.g. 500`,
    );
  }
  return value;
}

/** The limits a file asks for, every value checked; nothing is written here. */
export function rateLimitsOf(json: unknown, source: string): RateLimit[] {
  const file = fileSchema.safeParse(json);
  if (!file.success) {
    throw new UserError(
      `${source}: expected {"rateLimits": {"<provider>/<model>": {"requestsPerMinute": N, "tokensPerMinute": N}}} (${file.error.issues[0]?.message ?? 'invalid'})`,
    );
  }
  const entries = Object.entries(file.data.rateLimits);
  checkEntryCap(`${source}: rateLimits`, 'models', entries.length, MAX_RATE_LIMITS, 'limit the models your tasks use');
  return entries.map(([model, value]) => {
    const where = `${source}: rateLimits.${JSON.stringify(model)}`;
    if (!/^[a-z0-9-]+\/\S+$/.test(model)) {
      throw new UserError(
        `${where}: ${JSON.stringify(model)} is not a model key; write it as the price table does, e.g. "openai/gpt-4o-mini"`,
      );
    }
    const entry = entrySchema.safeParse(value);
    if (!entry.success) {
      throw new UserError(
        `${where}: expected {"requestsPerMinute": N, "tokensPerMinute": N} (${entry.error.issues[0]?.message ?? 'invalid'})`,
      );
    }
    const limit = {
      model,
      requestsPerMinute: perMinute(entry.data.requestsPerMinute, `${where}.requestsPerMinute`, MAX_REQUESTS_PER_MINUTE),
      tokensPerMinute: perMinute(entry.data.tokensPerMinute, `${where}.tokensPerMinute`, MAX_TOKENS_PER_MINUTE),
    };
    if (limit.requestsPerMinute === null && limit.tokensPerMinute === null) {
      throw new UserError(`${where}: give requestsPerMinute, tokensPerMinute or both`);
    }
    return limit;
  });
}

export function loadRateLimitsFile(path: string): RateLimit[] {
  const text = readInputFile(path, RATE_LIMITS_FILE);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new UserError(`rate limits file ${path} is not valid JSON: ${(err as Error).message}`);
  }
  return rateLimitsOf(json, path);
}
