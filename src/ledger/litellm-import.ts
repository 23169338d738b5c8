import { UserError } from '../errors';
import { numberText, parseKeepingNumberText, shiftDecimal } from '../json-number-text';
import type { ModelPrices, PricesFile, Rates } from './prices';

/**
 * `cronledger prices import --litellm FILE --models a,b`: entries of LiteLLM's model_prices_and_context_window.json
 * as a new price version. LiteLLM writes per-token rates as JSON numbers (1.5e-07); each is taken from the number's
 * decimal text and moved six places to the per-million unit by string work, never through a float, so "1.5e-07"
 * becomes "0.15" exactly. An entry is refused, by name, when it has a token rate cronledger can't represent (a token
 * class it does not price, or a rate beyond 12 decimals per million); rates of other things (per query, per image) are
 * left out and listed.
 */

/** LiteLLM's token-rate keys, by cronledger's class; a tier or long-context suffix may follow (see rateKeyOf). */
const CLASSES: Record<string, keyof Rates> = {
  input_cost_per_token: 'input',
  cache_read_input_token_cost: 'cachedInput',
  cache_creation_input_token_cost: 'cacheWrite5m',
  cache_creation_input_token_cost_above_1hr: 'cacheWrite1h',
  output_cost_per_token: 'output',
};
const TIERS: Record<string, 'batch' | 'flex' | 'priority'> = { batches: 'batch', flex: 'flex', priority: 'priority' };

interface RateKey {
  rate: keyof Rates;
  tier: 'standard' | 'batch' | 'flex' | 'priority';
  /** The long-context threshold in prompt tokens (`_above_272k_tokens`), when the key has one. */
  above: number | null;
}

/** `input_cost_per_token_above_272k_tokens_batches` → input, batch, above 272,000; null for a key it can't place. */
function rateKeyOf(key: string): RateKey | null {
  const m = /^(.*?)(?:_above_(\d+)k_tokens)?(?:_(batches|flex|priority))?$/.exec(key);
  if (!m) return null;
  const rate = CLASSES[m[1]];
  if (!rate) return null;
  return { rate, tier: m[3] ? TIERS[m[3]] : 'standard', above: m[2] ? Number(m[2]) * 1000 : null };
}

/** Keys that hold no token rate at all: left out of a price, said in the import's notes. */
const isTokenRateKey = (key: string): boolean => /token/.test(key) && /cost/.test(key);

/**
 * A per-token rate's decimal text ("1.5e-07", "3e-06", "0.000002") as an exact per-million decimal string ("0.15",
 * "3", "2"), or null when it is not a plain non-negative decimal or needs more than 12 fractional or integer digits.
 */
export function perMillionOf(text: string): string | null {
  const perMillion = text.startsWith('-') ? null : shiftDecimal(text, 6);
  if (perMillion === null) return null;
  const [whole, fraction = ''] = perMillion.split('.');
  return fraction.length > 12 || whole.length > 12 ? null : perMillion;
}

export interface LitellmImport {
  file: PricesFile;
  /** Rates of other things than tokens, left out: `model: key`. */
  leftOut: string[];
}

/** Builds the price version; every problem is a UserError naming the entry, and nothing is written. */
export function importLitellm(
  text: string,
  path: string,
  models: string[],
  version: { version: string; effectiveFrom: string },
): LitellmImport {
  let table: Record<string, Record<string, unknown>>;
  try {
    table = parseKeepingNumberText(text) as Record<string, Record<string, unknown>>;
  } catch (err) {
    throw new UserError(`LiteLLM prices file ${path} is not valid JSON: ${(err as Error).message}`);
  }
  const unknown = models.filter((m) => !table[m] && !table[m.slice(m.indexOf('/') + 1)]);
  if (unknown.length > 0) {
    throw new UserError(
      `${path} has no entry ${unknown.map((m) => `"${m}"`).join(', ')}; give the names as LiteLLM's file spells them ` +
        '(e.g. gpt-4o-mini, claude-sonnet-4-5); nothing was written',
    );
  }
  const leftOut: string[] = [];
  const out: Record<string, ModelPrices> = {};
  for (const name of models) {
    const entry = table[name] ?? table[name.slice(name.indexOf('/') + 1)];
    const bare = table[name] ? name : name.slice(name.indexOf('/') + 1);
    const provider = String(entry.litellm_provider ?? '');
    const key = bare.includes('/') ? bare : `${provider}/${bare}`;
    out[key] = pricesOfEntry(name, entry, leftOut);
  }
  return {
    file: {
      currency: 'USD',
      unit: 'per_million_tokens',
      versions: [
        { ...version, source: `LiteLLM ${path}: ${models.join(', ')} (per-token rates moved to per million exactly)`, models: out },
      ],
    },
    leftOut,
  };
}

function pricesOfEntry(name: string, entry: Record<string, unknown>, leftOut: string[]): ModelPrices {
  const embedding = entry.mode === 'embedding';
  const sets = new Map<string, Rates>();
  let above: number | null = null;
  for (const [key, value] of Object.entries(entry)) {
    if (!/cost/.test(key)) continue;
    const place = rateKeyOf(key);
    if (!place) {
      if (isTokenRateKey(key)) {
        throw new UserError(`LiteLLM entry "${name}" has a token rate cronledger can't represent: ${key}; nothing was written`);
      }
      leftOut.push(`${name}: ${key}`);
      continue;
    }
    const raw = numberText(value);
    const perMillion = raw === null ? null : perMillionOf(raw);
    if (perMillion === null) {
      throw new UserError(
        `LiteLLM entry "${name}" has a rate cronledger can't represent: ${key} = ${raw ?? JSON.stringify(value)} ` +
          '(a non-negative per-token rate with at most 12 decimals per million tokens); nothing was written',
      );
    }
    if (place.above !== null) {
      if (above !== null && above !== place.above) {
        throw new UserError(`LiteLLM entry "${name}" has two long-context thresholds (${above} and ${place.above}); nothing was written`);
      }
      above = place.above;
    }
    if (embedding && place.rate === 'output') {
      if (perMillion !== '0')
        throw new UserError(`LiteLLM entry "${name}" is an embedding model with an output rate: ${key}; nothing was written`);
      continue;
    }
    const rate = embedding && place.rate === 'input' ? 'embeddingInput' : place.rate;
    const set = `${place.tier}:${place.above !== null}`;
    sets.set(set, { ...sets.get(set), [rate]: perMillion });
  }
  const base = sets.get('standard:false');
  if (!base || !(base.embeddingInput || (base.input && base.output))) {
    throw new UserError(
      `LiteLLM entry "${name}" has no input and output rates (or, for an embedding model, no input rate); nothing was written`,
    );
  }
  const prices: ModelPrices = { ...base };
  const long = sets.get('standard:true');
  if (above !== null) prices.longContext = { aboveInputTokens: above, ...base, ...long };
  for (const tier of ['batch', 'flex', 'priority'] as const) {
    const t = sets.get(`${tier}:false`);
    const tLong = sets.get(`${tier}:true`);
    if (!t && !tLong) continue;
    prices.tiers = { ...prices.tiers, [tier]: { ...t, ...(tLong ? { longContext: { ...t, ...tLong } } : {}) } };
  }
  return prices;
}
