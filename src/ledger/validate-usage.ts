import { MAX_TOKENS_PER_CALL } from '../constants';
import { UserError } from '../errors';
import type { TokenUsage } from '../models/provider';

/** Usage the provider reported that cannot be true. Nothing is written for it; retrying would not help. */
export class InvalidUsageError extends UserError {
  constructor(message: string) {
    super(message);
    this.name = 'InvalidUsageError';
  }
}

/** Rejects negative, fractional, NaN, infinite, absurdly large or inconsistent counts before anything is written. */
export function validateUsage(usage: TokenUsage, where: string): void {
  for (const [name, value] of Object.entries(usage) as [keyof TokenUsage, unknown][]) {
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0 || value > MAX_TOKENS_PER_CALL) {
      throw new InvalidUsageError(
        `${where}: ${name} = ${String(value)} is not a token count; expected a whole number from 0 to ${MAX_TOKENS_PER_CALL} ` +
          "(nothing was booked; check the provider response or the task's simulate profile)",
      );
    }
  }
  if (usage.cachedPromptTokens > usage.promptTokens) {
    throw new InvalidUsageError(`${where}: cachedPromptTokens ${usage.cachedPromptTokens} exceeds promptTokens ${usage.promptTokens}`);
  }
  if (usage.reasoningTokens > usage.completionTokens) {
    throw new InvalidUsageError(`${where}: reasoningTokens ${usage.reasoningTokens} exceeds completionTokens ${usage.completionTokens}`);
  }
}
