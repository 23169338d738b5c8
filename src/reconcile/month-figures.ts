import type pg from 'pg';
import { monthBoundsSql } from '../db/month-bounds';
import { PROVIDERS, type Provider } from './provider-rows';

/**
 * A month of reconciliation per provider, over its UTC days (the providers' reports are daily in UTC): the ledger's
 * usage of the provider's models, what the provider's latest import of each day says, the differences booked for the
 * month's days, and the latest imports' unmatched keys. Each day counts the newest import that covers it. Money is
 * SQL's exact sum, as decimal strings.
 */
export interface ReconciliationMonth {
  provider: Provider;
  /** Days of the month some import covers. */
  daysImported: number;
  ledgerUsd: string;
  /** What the provider's cost reports say for the imported days (cronledger's scope), 0 with no import. */
  providerUsd: string;
  /** Reconciliation entries booked for the month's days. */
  bookedUsd: string;
  bookedEntries: number;
  unmatchedProviderKeys: number;
  unmatchedLedgerKeys: number;
}

/**
 * Whether any provider's import covers a day of the month or reconciliation booked for one: what the month's figures
 * would show, without their ledger side (a scan of the month's usage).
 */
export async function anyReconciliationIn(db: pg.Pool, month: string): Promise<boolean> {
  const m = monthBoundsSql('$1');
  const { rows } = await db.query<{ any: boolean }>(
    `select exists (select 1 from reconciliation_imports i
                     where i.provider = any($2::text[]) and i.from_day <= ${m.lastDay} and i.to_day >= ${m.firstDay})
         or exists (select 1 from reconciliation_entries e
                     where e.provider = any($2::text[]) and e.day between ${m.firstDay} and ${m.lastDay}) as any`,
    [month, PROVIDERS],
  );
  return rows[0].any;
}

export async function reconciliationMonth(db: pg.Pool, month: string): Promise<ReconciliationMonth[]> {
  const m = monthBoundsSql('$1');
  const { rows } = await db.query<Omit<ReconciliationMonth, 'provider'> & { provider: Provider }>(
    `with days as (select d::date as day from generate_series(${m.firstDay}, ${m.lastDay}, interval '1 day') d),
     latest as (
       select p.provider, days.day,
              (select i.id from reconciliation_imports i where i.provider = p.provider and days.day between i.from_day and i.to_day
                order by i.id desc limit 1) as import_id
         from days cross join unnest($2::text[]) p(provider)
     ),
     keys as (
       select l.provider, k.side from (select distinct provider, import_id from latest where import_id is not null) li
         cross join lateral reconciliation_keys(li.import_id) k
         join latest l on l.provider = li.provider and l.import_id = li.import_id and l.day = k.day
     )
     select p.provider,
            (select count(*) from latest l where l.provider = p.provider and l.import_id is not null)::int as "daysImported",
            (select coalesce(sum(s.cost_usd), 0) from reconciliation_ledger_side(p.provider, ${m.firstDay}, ${m.lastDay}) s)::text as "ledgerUsd",
            (select coalesce(sum(r.cost_usd), 0) from latest l
               join provider_usage_rows r on r.import_id = l.import_id and r.day = l.day and r.in_scope
              where l.provider = p.provider)::text as "providerUsd",
            (select coalesce(sum(u.cost_usd), 0) from reconciliation_entries e join usage_ledger u on u.id = e.ledger_entry_id
              where e.provider = p.provider and e.day between ${m.firstDay} and ${m.lastDay})::text as "bookedUsd",
            (select count(*) from reconciliation_entries e
              where e.provider = p.provider and e.day between ${m.firstDay} and ${m.lastDay})::int as "bookedEntries",
            (select count(*) from keys k where k.provider = p.provider and k.side = 'provider')::int as "unmatchedProviderKeys",
            (select count(*) from keys k where k.provider = p.provider and k.side = 'ledger')::int as "unmatchedLedgerKeys"
       from unnest($2::text[]) with ordinality p(provider, n) order by p.n`,
    [month, PROVIDERS],
  );
  return rows;
}

/** Every difference reconciliation ever booked, per provider, as exact decimal strings (for /metrics). */
export async function bookedDrift(db: pg.Pool): Promise<{ provider: Provider; bookedUsd: string; entries: number }[]> {
  const { rows } = await db.query<{ provider: Provider; bookedUsd: string; entries: number }>(
    `select p.provider, coalesce(sum(u.cost_usd), 0)::text as "bookedUsd", count(u.id)::int as entries
       from unnest($1::text[]) with ordinality p(provider, n)
       left join reconciliation_entries e on e.provider = p.provider
       left join usage_ledger u on u.id = e.ledger_entry_id
      group by p.provider, p.n order by p.n`,
    [PROVIDERS],
  );
  return rows;
}
