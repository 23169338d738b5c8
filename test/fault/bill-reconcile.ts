import { bookReconciliation, summarise } from '../../src/reconcile/book';
import { readProviderReports } from '../../src/reconcile/read-reports';
import type { UnbookedRequest } from '../support/chaos-figures';
import { costAtto, decimalText } from '../support/fake-billing';
import { DEFAULT_BILLING_RATES, FAKE_ADMIN_KEY, type BilledRequest } from '../support/fake-openai';
import { atto } from '../support/ledger';
import type { ChaosEnv } from './chaos-env';

/**
 * After a scenario that lost answers with their workers: `cronledger reconcile openai` against the fake's own bill (its
 * admin reports, built from its billing log) books what the ledger never saw. Its figures, each exact, beside an
 * oracle that shares nothing with the reconciliation: the lost answers' tokens and their cost at the fake's rates, and
 * the whole bill priced the same way.
 */
export interface BillReconciliation {
  bookedEntries: number;
  bookedTokens: bigint;
  bookedUsd: string;
  /** The answers lost with a killed worker: their tokens and cost at the fake's rates. */
  lostTokens: bigint;
  lostUsd: string;
  /** The ledger's USD (usage and reconciliation) and the fake's whole bill, over the same requests. */
  ledgerUsd: string;
  billUsd: string;
}

const costOf = (b: BilledRequest): bigint => {
  const rates = DEFAULT_BILLING_RATES[b.model];
  const cached = b.usage.cached_tokens ?? 0;
  return (
    costAtto(b.usage.prompt_tokens - cached, rates.input) +
    costAtto(cached, rates.cachedInput ?? rates.input) +
    costAtto(b.usage.completion_tokens ?? 0, rates.output ?? '0')
  );
};
const tokensOf = (b: BilledRequest): bigint => BigInt(b.usage.prompt_tokens + (b.usage.completion_tokens ?? 0));

export async function reconcileWithBill(
  env: ChaosEnv,
  opts: { startedAt: number; billed: BilledRequest[]; unbooked: UnbookedRequest[] },
): Promise<BillReconciliation> {
  const day = (ms: number) => new Date(ms).toISOString().slice(0, 10);
  const input = await readProviderReports({
    provider: 'openai',
    from: day(opts.startedAt),
    to: day(Date.now()),
    files: [],
    wholeOrganization: true,
    env: { OPENAI_BASE_URL: env.fake.baseURL, OPENAI_ADMIN_KEY: FAKE_ADMIN_KEY },
  });
  const summary = summarise((await bookReconciliation(env.operatorPool, input)).keys);
  const ids = opts.billed.map((b) => b.id);
  const { rows } = await env.pool.query<{ usd: string }>(
    `select coalesce(sum(cost_usd), 0)::text as usd from usage_ledger
      where (entry_type = 'usage' and provider_request_id = any($1)) or reconciliation_import_id is not null`,
    [ids],
  );
  const lost = opts.unbooked.map((u) => u.billed);
  return {
    bookedEntries: summary.booked,
    bookedTokens: BigInt(summary.bookedTokens),
    bookedUsd: decimalText(atto(summary.bookedUsd)),
    lostTokens: lost.reduce((n, b) => n + tokensOf(b), 0n),
    lostUsd: decimalText(lost.reduce((n, b) => n + costOf(b), 0n)),
    ledgerUsd: decimalText(atto(rows[0].usd)),
    billUsd: decimalText(opts.billed.reduce((n, b) => n + costOf(b), 0n)),
  };
}
