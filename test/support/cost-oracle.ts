import type { PriceRow } from '../../src/ledger/prices';
import type { CallKind, TokenUsage } from '../../src/models/provider';
import { atto } from './ledger';

/**
 * The tests' own cost of one call at one price version, in atto-USD (10^-18 USD), by plain BigInt arithmetic on the
 * price strings: an oracle that shares no code with cronledger, whose only cost rule is SQL (call_cost in
 * migrations/001_baseline.sql). Uncached prompt at input, cached prompt at cached input (input when the version has
 * none), completion (reasoning included) at output, an embedding's input at the embedding rate.
 */
export function oracleCost(kind: CallKind, usage: TokenUsage, price: PriceRow): bigint {
  const rate = (perMillion: string | null, what: string): bigint => {
    if (perMillion === null) throw new Error(`the oracle has no ${what} price in version ${price.version} of ${price.model}`);
    return atto(perMillion);
  };
  // price per million × tokens / 10^6: exact, since a price has at most 12 decimals and an atto amount 18
  const times = (perMillionAtto: bigint, tokens: number): bigint => {
    const product = perMillionAtto * BigInt(tokens);
    if (product % 1_000_000n !== 0n) throw new Error(`a price of ${price.model} has more than 12 decimals`);
    return product / 1_000_000n;
  };
  if (kind === 'embedding') return times(rate(price.embedding_input_per_million, 'embedding input'), usage.promptTokens);
  const input = rate(price.input_per_million, 'input');
  const cached = price.cached_input_per_million === null ? input : rate(price.cached_input_per_million, 'cached input');
  return (
    times(input, usage.promptTokens - usage.cachedPromptTokens) +
    times(cached, usage.cachedPromptTokens) +
    times(rate(price.output_per_million, 'output'), usage.completionTokens)
  );
}
