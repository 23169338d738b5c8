import type { ForecastAccuracy } from '../forecast/forecast-records';
/**
 * The usage report as data. Money is always an exact decimal string at the ledger scale (18 fractional digits, as
 * PostgreSQL prints numeric(38,18)); counts are integers. Nothing here is a float.
 * This file imports only types, so workflow code may import its types.
 */

import type { BudgetStatus } from '../budgets/budget-status';
import type { ReconciliationMonth } from '../reconcile/month-figures';

export type ReportCut = 'user' | 'day' | 'model';
export const REPORT_FORMATS = ['table', 'json', 'csv', 'csv-all', 'md', 'html'] as const;
export type ReportFormat = (typeof REPORT_FORMATS)[number];

/** What a line stands for: usage rows, or one kind of correcting entry shown on a line of its own. */
export type LineType = 'usage' | 'adjustment' | 'reconciliation' | 'credit';

export interface Figures {
  /** Model calls: usage entries. Corrections are entries but not calls. */
  calls: number;
  entries: number;
  promptTokens: number;
  cachedPromptTokens: number;
  completionTokens: number;
  reasoningTokens: number;
  costUsd: string;
}

export interface UserLine extends Figures {
  userId: string;
  line: LineType;
}

export interface DayLine extends Figures {
  /** Local date in the report's zone, YYYY-MM-DD. */
  day: string;
  kind: 'chat' | 'embedding' | null;
  line: LineType;
}

export interface ModelLine extends Figures {
  model: string | null;
  kind: 'chat' | 'embedding' | null;
  line: LineType;
}

export interface UnitEconomics {
  /** What the ratios divide: usage, adjustments and reconciliation deltas (what the model calls cost); credits excluded. */
  spendUsd: string;
  /** Runs that completed, counted by the moment they claimed their slot, inside the month. */
  completedRuns: number;
  failedRuns: number;
  /** Users with at least one model call in the month. */
  activeUsers: number;
  costPerCompletedRunUsd: string;
  costPerActiveUserUsd: string;
  completedRunsPerDollar: string;
  rounding: string;
}

export interface UsageReport {
  report: 'cronledger-usage';
  version: 1;
  month: string;
  timeZone: string;
  currency: 'USD';
  /** The month's first and last instant (exclusive) in UTC; `complete` is false while the month is still under way. */
  period: { from: string; to: string; complete: boolean };
  /** The ledger rows the report covers: a fingerprint that changes whenever the month's ledger does. */
  ledger: { entries: number; firstEntryId: string | null; lastEntryId: string | null };
  totals: Figures & {
    usageUsd: string;
    adjustmentsUsd: string;
    reconciliationUsd: string;
    creditsUsd: string;
  };
  byUser: UserLine[];
  byDay: DayLine[];
  byModel: ModelLine[];
  unitEconomics: UnitEconomics;
  failedCalls: { calls: number; costUsd: string };
  duplicateSkippedRuns: { runs: number; costUsd: string };
  /** The budget guard's month (src/reports/budget-section.ts); absent from a report built from rollups alone (the admin page). */
  budget?: BudgetSection;
  /** Per provider, the month against the providers' own reports (src/reports/reconciliation-section.ts); absent without imports. */
  reconciliation?: ReconciliationMonth[];
}

export interface BudgetSection {
  /** false while no budget was ever configured: no limit applied to anyone. */
  configured: boolean;
  /**
   * Users with a budget of their own, or with spend or reservations in the month: the figures `budgets status` shows,
   * for the report's month in each budget's zone.
   */
  users: BudgetStatus[];
  /** Runs claimed in the month that the guard blocked before any model call. */
  blockedRuns: number;
  /** Runs claimed in the month that ran on the cheap models. */
  downgradedRuns: number;
  /**
   * Slots of tasks paused for budget (onBudgetExhausted "pause") that the pause skipped: not run, and not missed. Counted
   * for the pauses that began in the month, once the budget sweeper resumed them; pausedTasks are still paused at its end.
   */
  skippedForBudget: { slots: number; pausedTasks: number };
  /** The default model's price for the downgraded calls' tokens, minus what was paid (ledger rows of the month). */
  downgradeSavings: { savedUsd: string; paidUsd: string; atDefaultPriceUsd: string; entries: number; unpricedEntries: number };
  /** Per user, the month's first recorded forecast against what the month spent (none recorded: empty). */
  forecasts?: ForecastAccuracy[];
}

/** What the monthly report activity hands back to the workflow (and the workflow to whoever started it). */
export interface ArtifactFile {
  name: string;
  path: string;
  bytes: number;
  sha256: string;
}

export interface ReportSummary {
  month: string;
  timeZone: string;
  complete: boolean;
  totalUsd: string;
  spendUsd: string;
  calls: number;
  completedRuns: number;
  activeUsers: number;
  costPerCompletedRunUsd: string;
  failedCalls: { calls: number; costUsd: string };
  duplicateSkippedRuns: { runs: number; costUsd: string };
  topUsers: { userId: string; costUsd: string }[];
}

export interface GeneratedReport {
  month: string;
  timeZone: string;
  dir: string;
  files: ArtifactFile[];
  /** sha256 of usage.json: the report's content, used to deliver each distinct report of an unfinished month once. */
  reportSha256: string;
  summary: ReportSummary;
}

export type DeliveryOutcome =
  | { status: 'posted'; target: string; attempt: number }
  | { status: 'already-delivered'; deliveredAt: string }
  | { status: 'not-configured' };

/** What one rollupRefresh run folded in (the rollup-refresh schedule's workflow). */
export interface RollupRefreshResult {
  entries: number;
  runChanges: number;
  buckets: number;
  /** Months under way that were not built yet and were built by this run, as `<zone> <YYYY-MM>`. */
  monthsBuilt: string[];
}
