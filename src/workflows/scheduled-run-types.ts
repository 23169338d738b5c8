// What a scheduledRun is started with and what it returns: the contract schedules, the CLI and tests share with it.

/**
 * The schedule action's argument: which applied version of which task to run, nothing more. The definition (user,
 * prompt, models, output cap) is loaded from task_versions by the run's first step, so whoever can start a workflow
 * can run only what `tasks apply` recorded, as it was recorded.
 */
export interface ScheduledRunInput {
  taskId: string;
  /** The fingerprint `tasks apply` recorded the version under (task_versions). */
  fingerprint: string;
  /** `cronledger tasks trigger`: claims `manual:<taskId>:<start time>`, never a slot, so it can't swallow one. */
  manual?: boolean;
  /**
   * `cronledger runs retry` and `backfill --retry-failed`: this execution may take the slot's claim over from the one
   * named here (its Temporal run ID) if that claim did not complete. Schedule firings never carry it.
   */
  retry?: { supersedesRunId: string };
}

export interface ScheduledRunResult {
  status: 'completed' | 'duplicate' | 'blocked' | 'rejected';
  /** A rejected run's reason: its task and fingerprint name no applied version, or its input carries other fields. */
  rejected?: string;
  tier?: 'default' | 'cheap' | 'blocked';
  /** A run downgraded other than by its budget's band: why (the task's maxCostPerRun, or counting others' reservations after a wait). */
  downgraded?: { reason: 'max-cost-per-run' | 'waited-for-reservations'; maxCostPerRunUsd?: string; waitedSeconds?: number };
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
  /**
   * Why: `monthly-limit` (the worst case does not fit beside what is spent and settled), `max-cost-per-run` (the task's
   * cap, whatever the budget), `waited-for-reservations` (it waited its longest for other runs' open reservations, and
   * does not fit beside them).
   */
  reason?: 'monthly-limit' | 'max-cost-per-run' | 'waited-for-reservations';
  /** The task's cap, with reason `max-cost-per-run`. */
  maxCostPerRunUsd?: string;
  /** How long the run waited for other runs' reservations before it was decided, when it did. */
  waitedSeconds?: number;
}
