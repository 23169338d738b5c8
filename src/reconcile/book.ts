import type pg from 'pg';
import { parseUsd, sumMoney, toExactString } from '../money';
import type { Provider, ProviderRow } from './provider-rows';
import type { Scope } from './scope';

/** One key's figures (exact decimal strings): the provider's now (null: it reports none), the ledger's, what earlier imports booked, and this import's entry. */
export interface ReconciledKey {
  day: string;
  model: string;
  tokenClass: string;
  serviceTier: string;
  /** both; provider: the ledger has no usage under the key; ledger: the provider reports none (listed, never booked). */
  side: 'both' | 'provider' | 'ledger';
  providerTokens: string | null;
  providerUsd: string | null;
  ledgerTokens: string;
  ledgerUsd: string;
  bookedBeforeTokens: string;
  bookedBeforeUsd: string;
  entryId: string | null;
  bookedTokens: string;
  bookedUsd: string;
}

export interface ImportInput {
  provider: Provider;
  source: 'api' | 'file';
  from: string;
  to: string;
  pagesSha256: string;
  scope: Scope;
  rows: (ProviderRow & { inScope: boolean })[];
}

export interface BookedImport {
  importId: string;
  importedAt: string;
  keys: ReconciledKey[];
}

/**
 * Records the import and books its differences: one call of record_reconciliation (migration 034), one transaction,
 * as the operator. The SQL computes every difference from the rows stored; nothing here adds money.
 */
export async function bookReconciliation(pool: pg.Pool, input: ImportInput): Promise<BookedImport> {
  const { rows } = await pool.query<{ result: BookedImport }>('select record_reconciliation($1, $2, $3, $4, $5, $6, $7) as result', [
    input.provider,
    input.source,
    input.from,
    input.to,
    input.pagesSha256,
    JSON.stringify(input.scope),
    JSON.stringify(input.rows),
  ]);
  return rows[0].result;
}

export interface ImportSummary {
  keys: number;
  /** Entries this import booked, and their USD and tokens summed (exact). */
  booked: number;
  bookedUsd: string;
  bookedTokens: string;
  unmatchedProviderKeys: number;
  unmatchedLedgerKeys: number;
}

export function summarise(keys: ReconciledKey[]): ImportSummary {
  const booked = keys.filter((k) => k.entryId !== null);
  return {
    keys: keys.length,
    booked: booked.length,
    bookedUsd: toExactString(sumMoney(booked.map((k) => parseUsd(k.bookedUsd)))),
    bookedTokens: String(booked.reduce((sum, k) => sum + BigInt(k.bookedTokens), 0n)),
    unmatchedProviderKeys: keys.filter((k) => k.side === 'provider').length,
    unmatchedLedgerKeys: keys.filter((k) => k.side === 'ledger').length,
  };
}
