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

const modelPricesSchema = z
  .object({
    input: price.optional(),
    cachedInput: price.optional(),
    output: price.optional(),
    embeddingInput: price.optional(),
  })
  .strict()
  .refine((p) => p.embeddingInput !== undefined || (p.input !== undefined && p.output !== undefined), {
    message: 'a chat model needs "input" and "output"; an embedding model needs "embeddingInput"',
  });

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
            source: z.string().optional(),
            models: z.record(z.string().min(1), modelPricesSchema),
          })
          .strict(),
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
  const parsed = pricesFileSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `  - ${i.path.join('.') || '(file)'}: ${i.message}`).join('\n');
    throw new UserError(`prices file ${path} is invalid:\n${issues}\nSee ${DEFAULT_PRICES_FILE} for the format.`);
  }
  const prices = parsed.data.versions.reduce((n, v) => n + Object.keys(v.models).length, 0);
  checkEntryCap(`prices file ${path}`, 'model prices', prices, MAX_PRICES, PRICES_FILE.fix);
  return parsed.data;
}

export interface ApplyPricesResult {
  added: { model: string; version: string }[];
  unchanged: { model: string; version: string }[];
}

/**
 * Adds every (model, version) of the file that the table lacks, in one transaction. A version that exists with
 * different prices or date is refused and nothing is written: published prices are history.
 */
export async function applyPrices(pool: pg.Pool, file: PricesFile, source: string): Promise<ApplyPricesResult> {
  return inTransaction(pool, async (db) => {
    // Appliers take turns (an advisory lock: the application role may not lock the table, it may only append).
    await db.query(`select pg_advisory_xact_lock(hashtextextended('cronledger-prices', 0))`);
    const result: ApplyPricesResult = { added: [], unchanged: [] };
    for (const v of file.versions) {
      for (const [model, p] of Object.entries(v.models)) {
        const inserted = await db.query(
          `insert into model_prices (model, version, effective_from, input_per_million, cached_input_per_million,
                                     output_per_million, embedding_input_per_million, source)
           values ($1, $2, $3, $4, $5, $6, $7, $8)
           on conflict do nothing returning id`,
          [
            model,
            v.version,
            v.effectiveFrom,
            p.input ?? null,
            p.cachedInput ?? null,
            p.output ?? null,
            p.embeddingInput ?? null,
            v.source ?? source,
          ],
        );
        if (inserted.rowCount === 1) {
          result.added.push({ model, version: v.version });
          continue;
        }
        const same = await db.query(
          `select 1 from model_prices
            where model = $1 and version = $2 and effective_from = $3
              and input_per_million is not distinct from $4::numeric
              and cached_input_per_million is not distinct from $5::numeric
              and output_per_million is not distinct from $6::numeric
              and embedding_input_per_million is not distinct from $7::numeric`,
          [model, v.version, v.effectiveFrom, p.input ?? null, p.cachedInput ?? null, p.output ?? null, p.embeddingInput ?? null],
        );
        if (same.rowCount === 0) {
          throw new UserError(
            `price version "${v.version}" of ${model} already exists with different prices or date (or another version ` +
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

/** The newest price version of `model` whose effective_from is at or before `at`. */
/** The price of model `$1` in force at `at` (an SQL expression): its newest version that took effect by then. */
export const priceInForceSql = (at: string): string =>
  `select * from model_prices where model = $1 and effective_from <= ${at} order by effective_from desc limit 1`;

export async function priceInForce(db: pg.Pool | pg.PoolClient, model: string, at: Date): Promise<PriceRow> {
  const { rows } = await db.query<PriceRow>(priceInForceSql('$2'), [model, at]);
  if (rows.length === 0) throw new NoPriceError(model, at);
  return rows[0];
}
