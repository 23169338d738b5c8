import type pg from 'pg';
import { displayUsd } from '../money';
import { anyReconciliationIn, reconciliationMonth, type ReconciliationMonth } from '../reconcile/month-figures';
import { formatTable } from '../text-table';
import type { Month } from './month';
import type { UsageReport } from './types';

/**
 * The report's reconciliation section (docs/reconciliation.md): per provider, over the month's UTC days, the ledger's
 * usage, what the provider's latest imports say, the differences booked and the keys only one side has. Absent while
 * nothing was ever imported for the month, so a ledger without reconciliation reports as before.
 */
export async function reconciliationSection(db: pg.Pool, month: Month): Promise<ReconciliationMonth[] | undefined> {
  if (!(await anyReconciliationIn(db, month))) return undefined;
  const months = await reconciliationMonth(db, month);
  return months.some((m) => m.daysImported > 0 || m.bookedEntries > 0) ? months : undefined;
}

export function reconciliationText(report: UsageReport): string[] {
  if (!report.reconciliation) return [];
  const rows = report.reconciliation.map((r) => [
    r.provider,
    String(r.daysImported),
    displayUsd(r.ledgerUsd),
    displayUsd(r.providerUsd),
    displayUsd(r.bookedUsd),
    String(r.bookedEntries),
    String(r.unmatchedProviderKeys),
    String(r.unmatchedLedgerKeys),
  ]);
  return [
    'Reconciliation with the providers (UTC days)',
    formatTable(
      ['PROVIDER', 'DAYS IMPORTED', 'LEDGER', 'PROVIDER BILL', 'BOOKED', 'ENTRIES', 'PROVIDER-ONLY KEYS', 'LEDGER-ONLY KEYS'],
      rows,
      [1, 2, 3, 4, 5, 6, 7],
    ),
    '',
  ];
}

/** The section in the sectioned CSV: section `reconciliation`, one `<provider>_<figure>` metric per row, exact. */
export function reconciliationCsvRows(report: UsageReport): { section: string; metric: string; value: string | number }[] {
  return (report.reconciliation ?? []).flatMap((r) =>
    (
      [
        ['days_imported', r.daysImported],
        ['ledger_usd', r.ledgerUsd],
        ['provider_usd', r.providerUsd],
        ['booked_usd', r.bookedUsd],
        ['booked_entries', r.bookedEntries],
        ['unmatched_provider_keys', r.unmatchedProviderKeys],
        ['unmatched_ledger_keys', r.unmatchedLedgerKeys],
      ] as const
    ).map(([metric, value]) => ({ section: 'reconciliation', metric: `${r.provider}_${metric}`, value })),
  );
}
