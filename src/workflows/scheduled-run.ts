import { log, proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { Activities } from '../activities';
import { NON_RETRYABLE_MODEL_ERRORS } from '../constants';
import type { SimulateProfile } from '../models/simulate-profile';
import { scheduledTimeOf, slotKey } from './scheduled-time';

/** The schedule action's argument: everything a run needs, so editing a task edits the schedule, not the code. */
export interface ScheduledRunInput {
  taskId: string;
  userId: string;
  input: string;
  model: string;
  embeddingModel: string;
  simulate?: SimulateProfile;
  /**
   * Set by `cronledger tasks trigger`: a manual run outside the cron. It claims `manual:<taskId>:<start time>` instead of
   * a slot key, so it never collides with (or silently swallows) a scheduled slot.
   */
  manual?: boolean;
  /**
   * Set by `cronledger runs retry` and `backfill --retry-failed`: this execution may take over the slot's claim from
   * the execution named here (its Temporal run ID), provided that claim is not completed. Schedule firings and native
   * backfills never carry it, so they can never re-run a slot.
   */
  retry?: { supersedesRunId: string };
}

export interface ScheduledRunResult {
  status: 'completed' | 'duplicate';
  idempotencyKey: string;
  scheduledMinute: string;
  chatCostUsd?: string;
  embeddingCostUsd?: string;
}

const bookkeeping = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds' },
});

const modelCalls = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  retry: {
    initialInterval: '1 second',
    backoffCoefficient: 2,
    maximumInterval: '1 minute',
    maximumAttempts: 5,
    nonRetryableErrorTypes: NON_RETRYABLE_MODEL_ERRORS,
  },
});

/**
 * One agent run for one schedule slot. It first claims the slot in PostgreSQL: if another execution already has it
 * (a native backfill, a re-created schedule, a second deployment), this one ends as `duplicate` before any model call.
 */
export async function scheduledRun(task: ScheduledRunInput): Promise<ScheduledRunResult> {
  const info = workflowInfo();
  const scheduledAt = scheduledTimeOf(info);
  const idempotencyKey = slotKey(task.taskId, scheduledAt);
  const scheduledMinute = `${scheduledAt.toISOString().slice(0, 16)}Z`;

  const claim = await bookkeeping.claimRun({ idempotencyKey, taskId: task.taskId, userId: task.userId, scheduledMinute });
  if (!claim.claimed) {
    log.info('slot already claimed by another execution; stopping as duplicate', { idempotencyKey, owner: claim.ownerWorkflowRunId });
    return { status: 'duplicate', idempotencyKey, scheduledMinute };
  }

  try {
    const step = { runId: info.workflowId, taskId: task.taskId, userId: task.userId, simulate: task.simulate };
    const chat = await modelCalls.chat({ ...step, step: 'chat', model: task.model, text: task.input });
    const memory = await modelCalls.embedMemory({ ...step, step: 'embed', model: task.embeddingModel, text: chat.text });
    await bookkeeping.completeRun({ idempotencyKey, status: 'completed' });
    return { status: 'completed', idempotencyKey, scheduledMinute, chatCostUsd: chat.costUsd, embeddingCostUsd: memory.costUsd };
  } catch (err) {
    const message = err instanceof Error ? (err.cause instanceof Error ? err.cause.message : err.message) : String(err);
    await bookkeeping.completeRun({ idempotencyKey, status: 'failed', error: message });
    throw err;
  }
}
