import type { SimulateProfile } from '../models/simulate-profile';

// What a scheduledRun is started with and what it returns: the contract schedules, the CLI and tests share with it.

/** The schedule action's argument: everything a run needs, so editing a task edits the schedule, not the code. */
export interface ScheduledRunInput {
  taskId: string;
  userId: string;
  input: string;
  model: string;
  embeddingModel: string;
  /** The reply's token cap (max_completion_tokens); absent: DEFAULT_MAX_OUTPUT_TOKENS. */
  maxOutputTokens?: number;
  simulate?: SimulateProfile;
  /** `cronledger tasks trigger`: claims `manual:<taskId>:<start time>`, never a slot, so it can't swallow one. */
  manual?: boolean;
  /**
   * `cronledger runs retry` and `backfill --retry-failed`: this execution may take the slot's claim over from the one
   * named here (its Temporal run ID) if that claim did not complete. Schedule firings never carry it.
   */
  retry?: { supersedesRunId: string };
}

export interface ScheduledRunResult {
  status: 'completed' | 'duplicate' | 'blocked';
  tier?: 'default' | 'cheap' | 'blocked';
  /** A blocked run's reason: the limit, spent and reserved it was decided on, and its worst case (USD, exact). */
  budget?: BudgetReason;
  idempotencyKey: string;
  scheduledMinute: string;
  /** Which execution of the slot this was (1 = first; a retry that took the claim over is 2, 3, ...). */
  generation?: number;
  manual?: boolean;
  /** A duplicate: the execution (Temporal run ID) that owns the claim. */
  ownerRunId?: string;
  chatCostUsd?: string;
  embeddingCostUsd?: string;
  /** The reply was longer than the embedding model accepts: its token count; the embedding covers the first tokens only. */
  embeddingInputTruncatedFrom?: number;
}

export interface BudgetReason {
  limitUsd: string | null;
  spentUsd: string;
  reservedUsd: string;
  worstCaseUsd: string;
  month: string;
  timeZone: string;
  /** Blocked after the run had started calling: the call that was not made, e.g. `chat call 2`. */
  blockedBefore?: string;
}
