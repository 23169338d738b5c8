import { subtract } from 'dinero.js/bigint';
import type pg from 'pg';
import { UserError } from '../errors';
import { DEFAULT_PRICES_FILE, rateSetsOf, type PricesFile } from '../ledger/prices';
import { parseUsd, sumMoney, toExactString, zero } from '../money';
import { quoted } from '../text-table';
import type { Month } from './month';
import { monthBounds } from './rollups-read';

/**
 * What-if repricing: a month's usage entries as they would have cost under other prices, read only. The cost of each
 * entry is SQL's (reprice_usage in migrations/038_what_if_repricing.sql, which prices with call_cost, the booking's
 * own rule); here the given prices are only shaped into the rows SQL reads, and the lines summed. Only usage entries are
 * repriced: adjustments, reconciliation and credits have no tokens to price.
 */

export interface RepriceLine {
  userId: string;
  taskId: string | null;
  model: string;
  /** The model the entries are priced as: their own, or the one a downgrade map names for it. */
  pricedAs: string;
  calls: number;
  ledgerUsd: string;
  repricedUsd: string;
  /** repriced - ledger: positive when the other prices cost more. */
  differenceUsd: string;
}

export interface Repricing {
  month: Month;
  timeZone: string;
  period: { from: string; to: string; complete: boolean };
  /** What the prices are: the prices file, or the version of the table. */
  prices: string;
  downgrade: string | null;
  lines: RepriceLine[];
  totals: { calls: number; ledgerUsd: string; repricedUsd: string; differenceUsd: string };
}

/** A version of model_prices or of a file, and its rate sets, as reprice_usage reads them (JSON rows of those tables). */
interface PriceSet {
  versions: Record<string, unknown>[];
  rates: Record<string, unknown>[];
}

/** A prices file as rows: each (version, model) a model_prices row with a made-up id, each rate set a model_price_rates row. */
export function priceSetOfFile(file: PricesFile): PriceSet {
  const set: PriceSet = { versions: [], rates: [] };
  for (const v of file.versions) {
    for (const [model, p] of Object.entries(v.models)) {
      const id = set.versions.length + 1;
      set.versions.push({
        id,
        model,
        version: v.version,
        effective_from: v.effectiveFrom,
        effective_to: v.effectiveTo ?? null,
        long_context_above: p.longContext?.aboveInputTokens ?? null,
      });
      for (const r of rateSetsOf(p)) {
        set.rates.push({
          price_id: id,
          service_tier: r.tier,
          long_context: r.long,
          input_per_million: r.input ?? null,
          cached_input_per_million: r.cachedInput ?? null,
          cache_write_5m_per_million: r.cacheWrite5m ?? null,
          cache_write_1h_per_million: r.cacheWrite1h ?? null,
          output_per_million: r.output ?? null,
          embedding_input_per_million: r.embeddingInput ?? null,
        });
      }
    }
  }
  return set;
}

interface RepricedRow {
  user_id: string;
  task_id: string | null;
  model: string;
  priced_as: string;
  entries: string;
  ledger_usd: string;
  repriced_usd: string | null;
  unpriced: string;
  first_unpriced_at: Date | null;
}

async function repriceRows(
  db: pg.Pool,
  period: { from: string; to: string },
  set: PriceSet,
  downgrade: Record<string, string>,
  models: string[] | null,
): Promise<RepricedRow[]> {
  const { rows } = await db.query<RepricedRow>(
    `select user_id, task_id, model, priced_as, entries::text, ledger_usd::numeric(38, 18)::text,
            repriced_usd::numeric(38, 18)::text, unpriced::text, first_unpriced_at
       from reprice_usage($1, $2, $3::jsonb, $4::jsonb, $5::jsonb, $6)`,
    [period.from, period.to, JSON.stringify(set.versions), JSON.stringify(set.rates), JSON.stringify(downgrade), models],
  );
  return rows;
}

const NONE = toExactString(zero());
const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

function repricing(base: Omit<Repricing, 'lines' | 'totals'>, rows: RepricedRow[]): Repricing {
  const lines: RepriceLine[] = rows
    .map((r) => ({
      userId: r.user_id,
      taskId: r.task_id,
      model: r.model,
      pricedAs: r.priced_as,
      calls: Number(r.entries),
      ledgerUsd: r.ledger_usd,
      repricedUsd: r.repriced_usd ?? NONE,
      differenceUsd: toExactString(subtract(parseUsd(r.repriced_usd ?? NONE), parseUsd(r.ledger_usd))),
    }))
    .sort((a, b) => cmp(a.userId, b.userId) || cmp(a.taskId ?? '', b.taskId ?? '') || cmp(a.model, b.model) || cmp(a.pricedAs, b.pricedAs));
  const ledger = sumMoney(lines.map((l) => parseUsd(l.ledgerUsd)));
  const repriced = sumMoney(lines.map((l) => parseUsd(l.repricedUsd)));
  return {
    ...base,
    lines,
    totals: {
      calls: lines.reduce((n, l) => n + l.calls, 0),
      ledgerUsd: toExactString(ledger),
      repricedUsd: toExactString(repriced),
      differenceUsd: toExactString(subtract(repriced, ledger)),
    },
  };
}

/**
 * The month under a prices file (each entry at the file's version in force at its moment, as if the file were the
 * price table), with an optional downgrade map (ledger model -> model to price it as). Entries the file cannot price
 * are a UserError listing each model, how many entries and the first, and the fix; nothing is guessed.
 */
export async function repriceMonth(
  db: pg.Pool,
  opts: {
    month: Month;
    timeZone: string;
    prices: PricesFile;
    pricesPath: string;
    downgrade?: { map: Record<string, string>; path: string };
  },
): Promise<Repricing> {
  const period = await monthBounds(db, opts.timeZone, opts.month);
  const rows = await repriceRows(db, period, priceSetOfFile(opts.prices), opts.downgrade?.map ?? {}, null);
  const unpriced = rows.filter((r) => Number(r.unpriced) > 0);
  if (unpriced.length > 0) {
    const byModel = new Map<string, { model: string; entries: number; first: Date }>();
    for (const r of unpriced) {
      const key = `${r.priced_as}\u0000${r.model}`;
      const seen = byModel.get(key);
      const first = r.first_unpriced_at!;
      byModel.set(key, {
        model: r.model,
        entries: (seen?.entries ?? 0) + Number(r.unpriced),
        first: seen && seen.first < first ? seen.first : first,
      });
    }
    const list = [...byModel.entries()]
      .sort(([a], [b]) => cmp(a, b))
      .map(([key, u]) => {
        const pricedAs = key.split('\u0000')[0];
        const as = pricedAs === u.model ? '' : ` (${quoted(u.model)} in the ledger, priced as ${quoted(pricedAs)} by the downgrade map)`;
        return `  - ${quoted(pricedAs)}${as}: ${u.entries} ${u.entries === 1 ? 'entry' : 'entries'}, the first at ${u.first.toISOString()}`;
      });
    throw new UserError(
      `prices file ${opts.pricesPath} has no price in force for some usage entries of ${opts.month} (${opts.timeZone}):\n` +
        `${list.join('\n')}\n` +
        `Add each model to the file (a version with effectiveFrom at or before the first entry, with rates for the service ` +
        `tier and context the entries were served at; see ${DEFAULT_PRICES_FILE}), or price it as another model with --downgrade FILE.`,
    );
  }
  return repricing(
    {
      month: opts.month,
      timeZone: opts.timeZone,
      period,
      prices: opts.pricesPath,
      downgrade: opts.downgrade?.path ?? null,
    },
    rows,
  );
}

/** A price version of the table, by its id: model and version, for choosing one (the admin's models page). */
export interface PriceVersionChoice {
  id: string;
  model: string;
  version: string;
  effectiveFrom: string;
}

export async function priceVersionChoices(db: pg.Pool): Promise<PriceVersionChoice[]> {
  const { rows } = await db.query<{ id: string; model: string; version: string; effective_from: Date }>(
    'select id::text, model, version, effective_from from model_prices order by model, effective_from',
  );
  return rows.map((r) => ({ id: r.id, model: r.model, version: r.version, effectiveFrom: r.effective_from.toISOString() }));
}

/**
 * The month's entries of one model as if one of its versions in the table had been in force all month: its rate
 * sets as price_rates reads them, every (tier, context) the version has. A line with entries of a tier or context the
 * version has no rates for is left out, its entries counted in `leftOut`. Null when the table has no such version.
 */
export async function repriceMonthAtVersion(
  db: pg.Pool,
  opts: { month: Month; timeZone: string; priceId: string },
): Promise<(Repricing & { version: PriceVersionChoice; leftOut: number }) | null> {
  if (!/^\d{1,18}$/.test(opts.priceId)) return null;
  const { rows: found } = await db.query<{ model: string; version: string; effective_from: Date; set: PriceSet }>(
    `select p.model, p.version, p.effective_from,
            jsonb_build_object(
              'versions', jsonb_build_array(to_jsonb(p) || '{"effective_from": "-infinity", "effective_to": null}'),
              'rates', (select jsonb_agg(to_jsonb(price_rates(p, s.tier, s.long)))
                          from (select 'standard' as tier, false as long
                                union all select r.service_tier, r.long_context from model_price_rates r where r.price_id = p.id) s)
            ) as set
       from model_prices p where p.id = $1`,
    [opts.priceId],
  );
  if (found.length === 0) return null;
  const v = found[0];
  const period = await monthBounds(db, opts.timeZone, opts.month);
  const rows = await repriceRows(db, period, v.set, {}, [v.model]);
  const version = { id: opts.priceId, model: v.model, version: v.version, effectiveFrom: v.effective_from.toISOString() };
  const priced = repricing(
    { month: opts.month, timeZone: opts.timeZone, period, prices: `${v.model} ${v.version}`, downgrade: null },
    rows.filter((r) => Number(r.unpriced) === 0),
  );
  const leftOut = rows.filter((r) => Number(r.unpriced) > 0).reduce((n, r) => n + Number(r.entries), 0);
  return { ...priced, version, leftOut };
}
