import type { ModelPrices, PriceRow, Rates } from '../../src/ledger/prices';
import type { CallKind, TokenUsage } from '../../src/models/provider';
import { atto } from './ledger';

/**
 * The tests' own cost of one call, in atto-USD (10^-18 USD), by plain BigInt arithmetic on the price strings of the
 * test's own price file: an oracle that shares no code with cronledger, whose only cost rule is SQL (call_cost in
 * migrations/031_price_dimensions.sql). The tier the provider reported (null: standard) and, above the model's
 * long-context threshold, its long-context rates; then the prompt tokens that are neither cache reads nor cache writes
 * at input, cache reads at cached input and each cache write at its own rate (each at input when the rates have none), completion
 * (reasoning included) at output, an embedding's input at the embedding rate.
 */
export function oracleCostAt(kind: CallKind, usage: TokenUsage, prices: ModelPrices, name = 'the model'): bigint {
  const tier = usage.serviceTier === null || usage.serviceTier === 'default' ? 'standard' : usage.serviceTier;
  const long = prices.longContext !== undefined && usage.promptTokens > prices.longContext.aboveInputTokens;
  let rates: Rates | undefined;
  if (tier === 'standard') rates = long ? prices.longContext : prices;
  else if (tier === 'batch' || tier === 'flex' || tier === 'priority') {
    const t = prices.tiers?.[tier];
    rates = long ? t?.longContext : t;
  }
  if (!rates) throw new Error(`the oracle has no ${tier}${long ? ' long-context' : ''} rates for ${name}`);
  const rate = (perMillion: string | undefined, what: string): bigint => {
    if (perMillion === undefined) throw new Error(`the oracle has no ${what} rate for ${name} (${tier}${long ? ', long context' : ''})`);
    return atto(perMillion);
  };
  // price per million × tokens / 10^6: exact, since a price has at most 12 decimals and an atto amount 18
  const times = (perMillionAtto: bigint, tokens: number): bigint => {
    const product = perMillionAtto * BigInt(tokens);
    if (product % 1_000_000n !== 0n) throw new Error(`a price of ${name} has more than 12 decimals`);
    return product / 1_000_000n;
  };
  if (kind === 'embedding') return times(rate(rates.embeddingInput, 'embedding input'), usage.promptTokens);
  const input = rate(rates.input, 'input');
  const cached = rates.cachedInput === undefined ? input : rate(rates.cachedInput, 'cached input');
  const plain = usage.promptTokens - usage.cachedPromptTokens - usage.cacheWrite5mTokens - usage.cacheWrite1hTokens;
  return (
    times(input, plain) +
    times(cached, usage.cachedPromptTokens) +
    times(rates.cacheWrite5m === undefined ? input : atto(rates.cacheWrite5m), usage.cacheWrite5mTokens) +
    times(rates.cacheWrite1h === undefined ? input : atto(rates.cacheWrite1h), usage.cacheWrite1hTokens) +
    times(rate(rates.output, 'output'), usage.completionTokens)
  );
}

/**
 * The oracle's worst case of a planned call: every prompt token at the dearest prompt rate of the tier, every
 * completion token at output; a prompt above the long-context threshold in either context (the threshold's worth at
 * the base rates, or the whole at the long-context rates), whichever is dearer.
 */
export function oracleWorstCase(kind: CallKind, prompt: number, completion: number, tier: string | null, prices: ModelPrices): bigint {
  const worstAt = (tokens: number, long: boolean): bigint => {
    const base =
      tier === null || tier === 'standard' || tier === 'default' ? prices : prices.tiers?.[tier as 'batch' | 'flex' | 'priority'];
    const rates = long ? (base === prices ? prices.longContext : (base as { longContext?: Rates } | undefined)?.longContext) : base;
    if (!rates) throw new Error(`the oracle has no ${tier ?? 'standard'} rates${long ? ' for long context' : ''}`);
    const perToken = (perMillion: string): bigint => atto(perMillion) / 1_000_000n;
    if (kind === 'embedding') return perToken(rates.embeddingInput ?? '0') * BigInt(tokens);
    const dearest = [rates.input, rates.cachedInput, rates.cacheWrite5m, rates.cacheWrite1h]
      .filter((r): r is string => r !== undefined)
      .map(atto)
      .reduce((a, b) => (b > a ? b : a), 0n);
    return (dearest * BigInt(tokens)) / 1_000_000n + (atto(rates.output ?? '0') * BigInt(completion)) / 1_000_000n;
  };
  const above = prices.longContext?.aboveInputTokens;
  if (above === undefined || prompt <= above) return worstAt(prompt, false);
  const [base, long] = [worstAt(above, false), worstAt(prompt, true)];
  return base > long ? base : long;
}

/** oracleCostAt at a version's standard rates as the table holds them (a version without tiers or long context). */
export function oracleCost(kind: CallKind, usage: TokenUsage, price: PriceRow): bigint {
  const rate = (perMillion: string | null): string | undefined => perMillion ?? undefined;
  const prices: ModelPrices = {
    input: rate(price.input_per_million),
    cachedInput: rate(price.cached_input_per_million),
    cacheWrite5m: rate(price.cache_write_5m_per_million),
    cacheWrite1h: rate(price.cache_write_1h_per_million),
    output: rate(price.output_per_million),
    embeddingInput: rate(price.embedding_input_per_million),
  };
  if (price.long_context_above !== null)
    throw new Error(`version ${price.version} of ${price.model} has long-context rates: use oracleCostAt`);
  return oracleCostAt(kind, usage, prices, `version ${price.version} of ${price.model}`);
}
