import { displayUsd } from '../money';
import { formatTable } from '../text-table';
import { csvText, renderJson } from './render';
import type { Repricing } from './reprice';

/**
 * `report --reprice` as text, in the report's formats: the table shows money as `$0.000996` (half-even, 6 decimals),
 * JSON and CSV the exact decimal strings. Pure functions of the repricing.
 */

export const REPRICE_FORMATS = ['table', 'json', 'csv'] as const;
export type RepriceFormat = (typeof REPRICE_FORMATS)[number];

export const REPRICE_NOTE = 'usage entries only: adjustments, reconciliation and credits have no tokens to reprice';

export function renderRepriceTable(r: Repricing): string {
  const so = r.period.complete ? '' : ' (month so far)';
  const under = `${r.prices}${r.downgrade ? `, models switched by ${r.downgrade}` : ''}`;
  const headers = ['USER', 'TASK', 'MODEL', 'PRICED AS', 'CALLS', 'LEDGER', 'REPRICED', 'DIFFERENCE'];
  const rows = r.lines.map((l) => [
    l.userId,
    l.taskId ?? '-',
    l.model,
    l.pricedAs,
    String(l.calls),
    displayUsd(l.ledgerUsd),
    displayUsd(l.repricedUsd),
    displayUsd(l.differenceUsd),
  ]);
  const t = r.totals;
  rows.push(['TOTAL', '', '', '', String(t.calls), displayUsd(t.ledgerUsd), displayUsd(t.repricedUsd), displayUsd(t.differenceUsd)]);
  return [
    `What-if repricing ${r.month}, ${r.timeZone}${so}, under ${under}`,
    '',
    formatTable(headers, rows, [4, 5, 6, 7]),
    '',
    `Nothing was written; ${REPRICE_NOTE}.`,
    '',
  ].join('\n');
}

export const renderRepriceJson = (r: Repricing): string => renderJson({ ...r, note: REPRICE_NOTE });

export const REPRICE_CSV_COLUMNS = ['user_id', 'task_id', 'model', 'priced_as', 'calls', 'ledger_usd', 'repriced_usd', 'difference_usd'];

/** One tidy table: a header, a row per (user, task, model, priced as), exact decimals, no total row. */
export const renderRepriceCsv = (r: Repricing): string =>
  csvText(
    REPRICE_CSV_COLUMNS,
    r.lines.map((l) => ({
      user_id: l.userId,
      task_id: l.taskId,
      model: l.model,
      priced_as: l.pricedAs,
      calls: l.calls,
      ledger_usd: l.ledgerUsd,
      repriced_usd: l.repricedUsd,
      difference_usd: l.differenceUsd,
    })),
  );

export function renderRepricing(r: Repricing, format: RepriceFormat): string {
  return format === 'json' ? renderRepriceJson(r) : format === 'csv' ? renderRepriceCsv(r) : renderRepriceTable(r);
}
