import { add, equal } from 'dinero.js/bigint';
import type pg from 'pg';
import { duplicateRuns } from '../db/run-outcomes';
import { parseUsd, toAttoUsd, toExactString, zero, type Money } from '../money';
import { budgetSection } from './budget-section';
import { reconciliationSection } from './reconciliation-section';
import { countPerDollar, moneyPer, RATIO_ROUNDING } from './economics';
import type { Month } from './month';
import type { OnProgress } from '../progress-bar';
import { monthBounds, readMonthSums, type MonthSums, type SumRow } from './rollups-read';
import { ensureMonthRollups } from './rollups-write';
import type { DayLine, Figures, LineType, ModelLine, UsageReport, UserLine } from './types';

/**
 * Builds the month's report from the daily rollups (refreshed first, never a scan of the raw ledger). The sums are
 * SQL's (numeric sums are exact); Dinero on its bigint calculator adds the few lines into totals and divides the
 * ratios. Every cut covers the same rollup rows, so each cut's lines add up to the same totals, which equal the SQL
 * sum of the month's ledger rows to the last digit. Ordering is fully specified (ties broken by plain code-unit
 * string order), so the same ledger always gives the same report.
 */
export async function buildReport(db: pg.Pool, opts: { month: Month; timeZone: string; onProgress?: OnProgress }): Promise<UsageReport> {
  const { month, timeZone: zone, onProgress } = opts;
  await ensureMonthRollups(db, zone, month, onProgress);
  const sums = await readMonthSums(db, zone, month, 'stored');
  const report = await reportFromSums(db, { month, timeZone: zone, sums });
  const reconciliation = await reconciliationSection(db, month);
  return {
    ...report,
    budget: await budgetSection(db, { month, period: report.period, runs: sums.runs }),
    ...(reconciliation ? { reconciliation } : {}),
  };
}

/**
 * The report of a month from its sums, however they were read: buildReport refreshes the rollups first; the admin
 * page, which may not write, reads them current without refreshing (freshness 'current'). Same sums, same report.
 */
export async function reportFromSums(db: pg.Pool, opts: { month: Month; timeZone: string; sums: MonthSums }): Promise<UsageReport> {
  const { month, timeZone: zone, sums } = opts;
  const period = await monthBounds(db, zone, month);

  const total = new Tally();
  const perLine = new Map<LineType, Tally>();
  const failed = new Tally();
  const userLines: UserLine[] = [];
  const dayLines: DayLine[] = [];
  const modelLines: ModelLine[] = [];
  const activeUsers = new Set<string>();

  for (const r of sums.lines) {
    const line = r.entry_type;
    const figures = new Tally().add(r).figures();
    if (r.cut === 'line') {
      total.add(r);
      perLine.set(line, new Tally().add(r));
    } else if (r.cut === 'user' && r.user_id !== null) {
      userLines.push({ userId: r.user_id, line, ...figures });
      if (line === 'usage') activeUsers.add(r.user_id);
    } else if (r.cut === 'day' && r.day !== null) dayLines.push({ day: r.day, kind: r.kind, line, ...figures });
    else if (r.cut === 'model') modelLines.push({ model: r.model, kind: r.kind, line, ...figures });
    else if (r.cut === 'status' && line === 'usage' && r.status === 'failed') failed.add(r);
  }
  const { first: firstEntryId, last: lastEntryId } = sums.span;

  userLines.sort((a, b) => lineOrder(a.line, b.line) || byCostDesc(a, b) || cmp(a.userId, b.userId));
  dayLines.sort((a, b) => cmp(a.day, b.day) || lineOrder(a.line, b.line) || kindOrder(a.kind, b.kind));
  modelLines.sort((a, b) => lineOrder(a.line, b.line) || byCostDesc(a, b) || cmpNullable(a.model, b.model) || kindOrder(a.kind, b.kind));

  // Each cut re-adds its own lines: a mismatch with the totals would be a bug here, never something to print.
  for (const [cut, ls] of [
    ['user', userLines],
    ['day', dayLines],
    ['model', modelLines],
  ] as const) {
    const sum = ls.reduce((m: Money, l) => add(m, parseUsd(l.costUsd)), zero());
    if (!equal(sum, total.cost)) throw new Error(`report by ${cut} adds up to ${toExactString(sum)}, not ${toExactString(total.cost)}`);
  }

  const lineCost = (line: LineType) => perLine.get(line)?.cost ?? zero();
  const spend = [lineCost('usage'), lineCost('adjustment'), lineCost('reconciliation')].reduce((a, b) => add(a, b), zero());
  const runs = sums.runs;
  const duplicates = await duplicateRuns(db, period.from, period.to);
  const users = BigInt(activeUsers.size);

  return {
    report: 'cronledger-usage',
    version: 1,
    month,
    timeZone: zone,
    currency: 'USD',
    period,
    ledger: {
      entries: toCount(total.entries),
      firstEntryId: firstEntryId === null ? null : firstEntryId.toString(),
      lastEntryId: lastEntryId === null ? null : lastEntryId.toString(),
    },
    totals: {
      ...total.figures(),
      usageUsd: toExactString(lineCost('usage')),
      adjustmentsUsd: toExactString(lineCost('adjustment')),
      reconciliationUsd: toExactString(lineCost('reconciliation')),
      creditsUsd: toExactString(lineCost('credit')),
    },
    byUser: userLines,
    byDay: dayLines,
    byModel: modelLines,
    unitEconomics: {
      spendUsd: toExactString(spend),
      completedRuns: toCount(runs.completed),
      failedRuns: toCount(runs.failed),
      activeUsers: activeUsers.size,
      costPerCompletedRunUsd: moneyPer(spend, runs.completed),
      costPerActiveUserUsd: moneyPer(spend, users),
      completedRunsPerDollar: countPerDollar(runs.completed, spend),
      rounding: RATIO_ROUNDING,
    },
    failedCalls: { calls: toCount(failed.calls), costUsd: toExactString(failed.cost) },
    duplicateSkippedRuns: { runs: toCount(duplicates.runs), costUsd: toExactString(duplicates.cost) },
  };
}

/** Sums of a few summed rows: counts as BigInt, money as Dinero bigint. */
class Tally {
  calls = 0n;
  entries = 0n;
  promptTokens = 0n;
  cachedPromptTokens = 0n;
  completionTokens = 0n;
  reasoningTokens = 0n;
  cost: Money = zero();

  add(r: SumRow): this {
    const entries = BigInt(r.entries);
    this.entries += entries;
    if (r.entry_type === 'usage') this.calls += entries;
    this.promptTokens += BigInt(r.prompt_tokens);
    this.cachedPromptTokens += BigInt(r.cached_prompt_tokens);
    this.completionTokens += BigInt(r.completion_tokens);
    this.reasoningTokens += BigInt(r.reasoning_tokens);
    this.cost = add(this.cost, parseUsd(r.cost_usd, 'rollup cost_usd'));
    return this;
  }

  figures(): Figures {
    return {
      calls: toCount(this.calls),
      entries: toCount(this.entries),
      promptTokens: toCount(this.promptTokens),
      cachedPromptTokens: toCount(this.cachedPromptTokens),
      completionTokens: toCount(this.completionTokens),
      reasoningTokens: toCount(this.reasoningTokens),
      costUsd: toExactString(this.cost),
    };
  }
}

/** Counts leave as JSON numbers; one beyond 2^53 would be a corrupt ledger, so refuse rather than round. */
function toCount(n: bigint): number {
  if (n > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`count ${n} is too large to report exactly`);
  return Number(n);
}

const LINE_ORDER: LineType[] = ['usage', 'adjustment', 'reconciliation', 'credit'];
const lineOrder = (a: LineType, b: LineType) => LINE_ORDER.indexOf(a) - LINE_ORDER.indexOf(b);
const KIND_ORDER = ['chat', 'embedding', null];
const kindOrder = (a: string | null, b: string | null) => KIND_ORDER.indexOf(a) - KIND_ORDER.indexOf(b);
const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
const cmpNullable = (a: string | null, b: string | null) => (a === b ? 0 : a === null ? 1 : b === null ? -1 : cmp(a, b));
const byCostDesc = (a: Figures, b: Figures) => {
  const x = toAttoUsd(parseUsd(a.costUsd));
  const y = toAttoUsd(parseUsd(b.costUsd));
  return x > y ? -1 : x < y ? 1 : 0;
};
