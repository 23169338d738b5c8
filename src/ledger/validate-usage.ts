import { MAX_TOKENS_PER_CALL } from '../constants';
import { UserError } from '../errors';
import { TOKEN_COUNTS, type TokenUsage } from '../models/provider';

/** A tier's name as a provider reports it: lower-case letters, digits, "_" or "-". */
const SERVICE_TIER_NAME = /^[a-z0-9_-]{1,32}$/;

/** Usage the provider reported that cannot be true. Nothing is written for it; retrying would not help. */
export class InvalidUsageError extends UserError {
  constructor(message: string) {
    super(message);
    this.name = 'InvalidUsageError';
  }
}

/**
 * Rejects negative, fractional, NaN, infinite, absurdly large or inconsistent counts, and a service tier that is no
 * tier's name, before anything is written.
 */
export function validateUsage(usage: TokenUsage, where: string): void {
  for (const name of TOKEN_COUNTS) {
    const value: unknown = usage[name];
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0 || value > MAX_TOKENS_PER_CALL) {
      throw new InvalidUsageError(
        `${where}: ${name} = ${String(value)} is not a token count; expected a whole number from 0 to ${MAX_TOKENS_PER_CALL} ` +
          "(nothing was booked; check the provider response or the task's simulate profile)",
      );
    }
  }
  const tier: unknown = usage.serviceTier;
  if (tier !== null && (typeof tier !== 'string' || !SERVICE_TIER_NAME.test(tier))) {
    throw new InvalidUsageError(
      `${where}: serviceTier = ${JSON.stringify(tier) ?? String(tier)} is not a service tier; expected null or a name such as "standard" or "batch"`,
    );
  }
  const cacheParts = usage.cachedPromptTokens + usage.cacheWrite5mTokens + usage.cacheWrite1hTokens;
  if (cacheParts > usage.promptTokens) {
    throw new InvalidUsageError(
      `${where}: cache reads and writes (cachedPromptTokens ${usage.cachedPromptTokens} + cacheWrite5mTokens ` +
        `${usage.cacheWrite5mTokens} + cacheWrite1hTokens ${usage.cacheWrite1hTokens}) exceed promptTokens ${usage.promptTokens}`,
    );
  }
  if (usage.reasoningTokens > usage.completionTokens) {
    throw new InvalidUsageError(`${where}: reasoningTokens ${usage.reasoningTokens} exceeds completionTokens ${usage.completionTokens}`);
  }
}
