import type pg from 'pg';
import { z } from 'zod';
import { UserError } from '../errors';
import { checkEntryCap, PRICES_FILE, readInputFile } from '../input-file';
import { inTransaction } from '../db/pool';

/**
 * Prices are data: versioned rows with an effective date, loaded from a prices file. A change is a new version
 * that takes effect at its timestamp; an existing version is never altered, so history never changes.
 */
export const DEFAULT_PRICES_FILE = 'prices/standard.json';

// Per-million-token prices as exact decimal strings (never JSON numbers), at most 12 fractional digits.
const price = z.string().regex(/^\d{1,12}(\.\d{1,12})?$/, 'must be a decimal string such as "0.15" (at most 12 decimals)');

/** The price classes of one set of rates, by the price file's names. */
const rateClasses = {
  input: price.optional(),
  cachedInput: price.optional(),
  cacheWrite5m: price.optional(),
  cacheWrite1h: price.optional(),
  output: price.optional(),
  embeddingInput: price.optional(),
};
export type Rates = { [K in keyof typeof rateClasses]?: string };

const CHAT_OR_EMBEDDING = {
  message: 'a chat model needs "input" and "output"; an embedding model needs "embeddingInput"',
};
const pricesACall = (r: Rates): boolean => r.embeddingInput !== undefined || (r.input !== undefined && r.output !== undefined);

const longContextRates = z.object(rateClasses).strict().refine(pricesACall, CHAT_OR_EMBEDDING);
const tierRates = z
  .object({ ...rateClasses, longContext: longContextRates.optional() })
  .strict()
  .refine(pricesACall, CHAT_OR_EMBEDDING);

/**
 * A model's prices in one version: the standard tier's rates; optionally a long-context threshold (prompt tokens above
 * which the whole request takes the longContext rates); optionally the rates of other service tiers, each with its own
 * long-context rates.
 */
const modelPricesSchema = z
  .object({
    ...rateClasses,
    longContext: z
      .object({
        aboveInputTokens: z.number().int('must be a whole number of prompt tokens').positive('must be above 0'),
        ...rateClasses,
      })
      .strict()
      .refine(pricesACall, CHAT_OR_EMBEDDING)
      .optional(),
    tiers: z.object({ batch: tierRates.optional(), flex: tierRates.optional(), priority: tierRates.optional() }).strict().optional(),
  })
  .strict()
  .refine(pricesACall, CHAT_OR_EMBEDDING)
  .superRefine((p, ctx) => {
    for (const [tier, rates] of Object.entries(p.tiers ?? {})) {
      if (rates?.longContext && !p.longContext) {
        ctx.addIssue({
          code: 'custom',
          path: ['tiers', tier, 'longContext'],
          message: 'long-context rates need the model\'s own "longContext" with its "aboveInputTokens" threshold',
        });
      }
    }
  });

export type ModelPrices = z.infer<typeof modelPricesSchema>;

const pricesFileSchema = z
  .object({
    currency: z.literal('USD'),
    unit: z.literal('per_million_tokens'),
    versions: z
      .array(
        z
          .object({
            version: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'must be letters, digits, ".", "_" or "-"'),
            effectiveFrom: z.iso.datetime({ offset: true }),
            /** When the version stops (a promotional price); the newest older version still in force applies after it. */
            effectiveTo: z.iso.datetime({ offset: true }).optional(),
            source: z.string().optional(),
            models: z.record(z.string().min(1), modelPricesSchema),
          })
          .strict()
          .refine((v) => v.effectiveTo === undefined || Date.parse(v.effectiveTo) > Date.parse(v.effectiveFrom), {
            path: ['effectiveTo'],
            message: 'must be after effectiveFrom',
          }),
      )
      .min(1),
  })
  .strict();

export type PricesFile = z.infer<typeof pricesFileSchema>;

/** One row of model_prices. Prices are exact decimal strings as PostgreSQL prints them, null when that class is unpriced. */
export interface PriceRow {
  id: string;
  model: string;
  version: string;
  effective_from: Date;
  input_per_million: string | null;
  cached_input_per_million: string | null;
  output_per_million: string | null;
  embedding_input_per_million: string | null;
  source: string;
  effective_to: Date | null;
  cache_write_5m_per_million: string | null;
  cache_write_1h_per_million: string | null;
  /** Prompt tokens above which the whole request takes the long-context rates (model_price_rates); null: none. */
  long_context_above: string | null;
}

/** Model prices in one file, over all its versions. */
export const MAX_PRICES = 10_000;

export function loadPricesFile(path: string): PricesFile {
  const text = readInputFile(path, PRICES_FILE);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new UserError(`prices file ${path} is not valid JSON: ${(err as Error).message}`);
  }
  return checkPricesFile(json, path);
}

/** A prices file's content, checked as `prices apply` checks it; every problem named with the value given. */
export function checkPricesFile(json: unknown, path: string): PricesFile {
  const parsed = pricesFileSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `  - ${i.path.join('.') || '(file)'}: ${i.message}${given(json, i.path)}`).join('\n');
    throw new UserError(`prices file ${path} is invalid:\n${issues}\nSee ${DEFAULT_PRICES_FILE} for the format.`);
  }
  const prices = parsed.data.versions.reduce((n, v) => n + Object.keys(v.models).length, 0);
  checkEntryCap(`prices file ${path}`, 'model prices', prices, MAX_PRICES, PRICES_FILE.fix);
  return parsed.data;
}

/** The value a file gave at an issue's path, when it is a plain value, so the message names it: ` (got "-1")`. */
function given(json: unknown, path: PropertyKey[]): string {
  let at: unknown = json;
  for (const key of path) at = at !== null && typeof at === 'object' ? (at as Record<PropertyKey, unknown>)[key] : undefined;
  return at === undefined || (at !== null && typeof at === 'object') ? '' : ` (got ${JSON.stringify(at)})`;
}

export interface ApplyPricesResult {
  added: { model: string; version: string }[];
  unchanged: { model: string; version: string }[];
}

/** One (tier, context) of a model's prices in a version, as model_price_rates (and the base columns) hold it. */
export interface RateSet extends Rates {
  tier: 'standard' | 'batch' | 'flex' | 'priority';
  long: boolean;
}

/** Every (tier, context) a model's prices give: the standard base first, then long context, then the other tiers. */
export function rateSetsOf(p: ModelPrices): RateSet[] {
  const only = (r: Rates): Rates => ({
    input: r.input,
    cachedInput: r.cachedInput,
    cacheWrite5m: r.cacheWrite5m,
    cacheWrite1h: r.cacheWrite1h,
    output: r.output,
    embeddingInput: r.embeddingInput,
  });
  const sets: RateSet[] = [{ tier: 'standard', long: false, ...only(p) }];
  if (p.longContext) sets.push({ tier: 'standard', long: true, ...only(p.longContext) });
  for (const tier of ['batch', 'flex', 'priority'] as const) {
    const t = p.tiers?.[tier];
    if (!t) continue;
    sets.push({ tier, long: false, ...only(t) });
    if (t.longContext) sets.push({ tier, long: true, ...only(t.longContext) });
  }
  return sets;
}

/** Rate sets as add_price reads them from JSON: the standard set below the threshold first, each rate an exact decimal string or null. */
const rateSetJson = (sets: RateSet[]): string =>
  JSON.stringify(
    sets.map((r) => ({
      tier: r.tier,
      long: r.long,
      input: r.input ?? null,
      cachedInput: r.cachedInput ?? null,
      cacheWrite5m: r.cacheWrite5m ?? null,
      cacheWrite1h: r.cacheWrite1h ?? null,
      output: r.output ?? null,
      embeddingInput: r.embeddingInput ?? null,
    })),
  );

/** Whether the rate set `e` (JSON) equals rates `x` (a model_price_rates value), class by class, as numbers. */
const SAME_RATES = ['input', 'cached_input', 'cache_write_5m', 'cache_write_1h', 'output', 'embedding_input']
  .map(
    (c) => `(x).${c}_per_million is not distinct from (e ->> '${c.replace(/_([a-z0-9])/g, (_m, l: string) => l.toUpperCase())}')::numeric`,
  )
  .join(' and ');

/**
 * Adds every (model, version) of the file that the table lacks, in one transaction, through add_price (which records
 * who added it): the version's row (standard rates, cache writes, long-context threshold, end) and a model_price_rates
 * row for each other tier and context. A version that exists with different prices or dates is refused and nothing is
 * written: published prices are history.
 */
export async function applyPrices(pool: pg.Pool, file: PricesFile, source: string): Promise<ApplyPricesResult> {
  return inTransaction(pool, async (db) => {
    // Appliers take turns (an advisory lock: the operator may not lock the table, it may only append through add_price).
    await db.query(`select pg_advisory_xact_lock(hashtextextended('cronledger-prices', 0))`);
    const result: ApplyPricesResult = { added: [], unchanged: [] };
    for (const v of file.versions) {
      for (const [model, p] of Object.entries(v.models)) {
        const sets = rateSetJson(rateSetsOf(p));
        const at = [model, v.version, v.effectiveFrom, v.effectiveTo ?? null, p.longContext?.aboveInputTokens ?? null];
        const added = await db.query<{ id: string | null }>('select add_price($1, $2, $3, $4, $5, $6, $7::jsonb) as id', [
          ...at,
          v.source ?? source,
          sets,
        ]);
        if (added.rows[0].id !== null) {
          result.added.push({ model, version: v.version });
          continue;
        }
        const same = await db.query(
          `select 1 from model_prices p
            where p.model = $1 and p.version = $2 and p.effective_from = $3 and p.effective_to is not distinct from $4
              and p.long_context_above is not distinct from $5
              and (select count(*) from model_price_rates r where r.price_id = p.id) + 1 = jsonb_array_length($6::jsonb)
              and not exists (select from jsonb_array_elements($6::jsonb) e
                               cross join lateral (select price_rates(p, e ->> 'tier', (e ->> 'long')::boolean) as x) r
                               where not coalesce(${SAME_RATES}, false))`,
          [...at, sets],
        );
        if (same.rowCount === 0) {
          throw new UserError(
            `price version "${v.version}" of ${model} already exists with different prices or dates (or another version ` +
              `starts at ${v.effectiveFrom}); prices are never edited: add a new version with a later effectiveFrom`,
          );
        }
        result.unchanged.push({ model, version: v.version });
      }
    }
    return result;
  });
}

export async function listPrices(db: pg.Pool | pg.PoolClient): Promise<PriceRow[]> {
  return (await db.query<PriceRow>('select * from model_prices order by model, effective_from')).rows;
}

/** No call without a price: thrown before any spend. Non-retryable when it surfaces in an activity. */
export class NoPriceError extends UserError {
  constructor(model: string, at: Date, what = 'price') {
    super(
      `no ${what} in force for model "${model}" at ${at.toISOString()}; add the model to a prices file ` +
        `(see ${DEFAULT_PRICES_FILE}) and run \`cronledger prices apply FILE\``,
    );
    this.name = 'NoPriceError';
  }
}

/** SQLSTATE of the no-price error that the SQL functions raise (book_usage, reserve_budget). */
export const NO_PRICE_SQLSTATE = 'CL001';

/**
 * The SQL functions' no-price error as the NoPriceError it stands for (its DETAIL carries model, instant and which
 * price), so callers keep telling a user's missing price from a database failure. Any other error is returned as is.
 */
export function fromDatabaseError(err: unknown): unknown {
  const e = err as { code?: string; detail?: string };
  if (e?.code !== NO_PRICE_SQLSTATE || !e.detail) return err;
  const d = JSON.parse(e.detail) as { model: string; at: string; what: string };
  return new NoPriceError(d.model, new Date(d.at), d.what);
}

/** The price version of `model` in force at `at`: the newest that has started and not ended (price_version_at). */
export async function priceInForce(db: pg.Pool | pg.PoolClient, model: string, at: Date): Promise<PriceRow> {
  const { rows } = await db.query<PriceRow>('select * from price_version_at($1, $2)', [model, at]);
  if (rows.length === 0) throw new NoPriceError(model, at);
  return rows[0];
}
