/** Names shared by the worker, the client, the CLI and the workflows. Workflows may import this file: it has no Node imports. */

export const DEFAULT_TASK_QUEUE = 'cronledger';

/** Custom search attributes, registered on the dev server with `--search-attribute NAME=Keyword`. */
export const SEARCH_ATTRIBUTES = {
  taskId: 'TaskId',
  userId: 'UserId',
  /** The budget tier a run ran at: default, cheap or blocked. */
  tier: 'Tier',
} as const;

/** Prefix of every schedule and scheduled workflow ID that cronledger owns. */
export const TASK_SCHEDULE_PREFIX = 'cron-';
export const REPORT_SCHEDULE_ID = 'report-monthly';
export const ROLLUP_SCHEDULE_ID = 'rollup-refresh';
export const BUDGET_SWEEP_SCHEDULE_ID = 'budget-sweep';
export const RECONCILE_SCHEDULE_ID = 'reconcile-daily';

/**
 * The task queue of the reconcile worker (`cronledger reconcile worker`), beside the main one: only that process holds
 * the operator database URL and the providers' admin keys, so reconcileDaily's activity runs there and nowhere else.
 */
export const reconcileTaskQueue = (taskQueue: string): string => `${taskQueue}-reconcile`;

/** Memo key that marks a schedule as created by cronledger, so `tasks apply` never deletes anyone else's. */
export const MANAGED_BY_MEMO_KEY = 'managedBy';
export const MANAGED_BY_VALUE = 'cronledger';

export const DEFAULT_CHAT_MODEL = 'openai/gpt-4o-mini';
export const DEFAULT_EMBEDDING_MODEL = 'openai/text-embedding-3-small';

/** A task's reply cap when it sets no maxOutputTokens; it bounds the budget guard's worst case. */
export const DEFAULT_MAX_OUTPUT_TOKENS = 1024;

/** Any single call reporting more tokens than this in one class is treated as corrupt usage data. */
export const MAX_TOKENS_PER_CALL = 10_000_000;

export const taskScheduleId = (taskId: string): string => `${TASK_SCHEDULE_PREFIX}${taskId}`;
