import { add } from 'dinero.js/bigint';
import { costAtPerMillion, parseUsd, zero, type Money } from '../money';
import type { TokenUsage } from '../models/provider';
import { NoPriceError, type PriceRow } from './prices';

export type CallKind = 'chat' | 'embedding';

/**
 * Cost of one call at one price version, each token class at its own rate: uncached prompt at input, cached prompt
 * at cached input (input when the version has no cached rate), completion (reasoning included) at output, and
 * embedding input at the embedding rate. Exact: Dinero on bigint, no rounding.
 */
export function costOfUsage(kind: CallKind, usage: TokenUsage, price: PriceRow, at: Date): Money {
  const rate = (value: string | null, what: string): Money => {
    if (value === null) throw new NoPriceError(price.model, at, `${what} price (version ${price.version})`);
    return parseUsd(value, `${what} price`);
  };
  if (kind === 'embedding') {
    return costAtPerMillion(rate(price.embedding_input_per_million, 'embedding input'), BigInt(usage.promptTokens));
  }
  const input = rate(price.input_per_million, 'input');
  const cached = price.cached_input_per_million === null ? input : rate(price.cached_input_per_million, 'cached input');
  const output = rate(price.output_per_million, 'output');
  const uncached = BigInt(usage.promptTokens - usage.cachedPromptTokens);
  return [
    costAtPerMillion(input, uncached),
    costAtPerMillion(cached, BigInt(usage.cachedPromptTokens)),
    costAtPerMillion(output, BigInt(usage.completionTokens)),
  ].reduce((total, part) => add(total, part), zero());
}
