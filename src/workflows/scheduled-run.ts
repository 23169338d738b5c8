import {
  ActivityCancellationType,
  type ActivityOptions,
  ApplicationFailure,
  CancellationScope,
  isCancellation,
  log,
  proxyActivities,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import type { ReserveRunInput } from '../activities/budget-activities';
import type { BookUsageInput, BookUsageResult, ModelCallInput, ModelCallOutcome, CompletedRunInput } from '../activities/run-activities';
import { DEFAULT_MAX_OUTPUT_TOKENS, SEARCH_ATTRIBUTES } from '../constants';
import { manualKey, manualTimeOf, scheduledTimeOf, slotKey } from './scheduled-time';
import { costOf, downgradeOf, messageOf, reasonOf } from './run-results';
import { awaitReservations, bookkeeping, deliverEvents, endBlocked, type Run } from './run-budget';
import type { BudgetReason, ScheduledRunInput, ScheduledRunResult } from './scheduled-run-types';

export type { BudgetReason, ScheduledRunInput, ScheduledRunResult } from './scheduled-run-types';

/** The fields a run's input may carry; an input with any other (a user, a prompt, a model) is forged and rejected. */
const INPUT_FIELDS: readonly string[] = ['taskId', 'fingerprint', 'manual', 'retry'] satisfies (keyof ScheduledRunInput)[];

/**
 * A provider answer that carried usage but failed is booked as failed and the step called again under the next attempt
 * number, this many calls per step at most, so a provider that keeps billing broken replies can't drain a budget.
 */
export const MAX_CALLS_PER_STEP = 5;

/**
 * The database steps are local activities (bookkeeping, with the reason in run-budget.ts). The model calls are activities: the provider bills each request, so its answer must be in history the moment it
 * exists, and a dead worker's call must be noticed (local activities can't heartbeat, and one lost with its worker
 * would be called, and billed, again). They retry on a time budget, not a count: 30 minutes per call in all, 2 minutes
 * per request (the OpenAI client's own timeout is 90 s), a heartbeat every 5 s against a 30 s timeout so a dead
 * worker's call is retried within about 30 s and a cancel reaches the request, backoff from 1 s doubling to 2 minutes
 * (a provider's Retry-After replaces the next delay). On cancel the workflow waits for the call to end, so an answer
 * that came back is still booked. What retrying can't fix the activity throws non-retryable itself.
 */
export const MODEL_CALL_OPTIONS: ActivityOptions = {
  scheduleToCloseTimeout: '30 minutes',
  startToCloseTimeout: '2 minutes',
  heartbeatTimeout: '30 seconds',
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '2 minutes' },
};
const modelCalls = proxyActivities<Activities>(MODEL_CALL_OPTIONS);

/**
 * One agent run for one schedule slot (or one manual trigger): claim the slot and reserve the budget, call and book the
 * chat, call and book the embedding, store the memory and close the claim. Whatever ends it early closes the claim.
 */
export async function scheduledRun(task: ScheduledRunInput): Promise<ScheduledRunResult> {
  const info = workflowInfo();
  const shield = new CancellationScope({ cancellable: false });
  const at = task.manual ? manualTimeOf(info) : scheduledTimeOf(info);
  const idempotencyKey = task.manual ? manualKey(task.taskId, at) : slotKey(task.taskId, at);
  const head = { idempotencyKey, scheduledMinute: `${at.toISOString().slice(0, 16)}Z`, ...(task.manual ? { manual: true } : {}) };
  const { workflowId, runId } = info;
  const { taskId, fingerprint } = task;
  const unexpectedFields = Object.keys(task).filter((k) => !INPUT_FIELDS.includes(k));
  let reserved = false;
  try {
    // 1. Load the applied version, claim the slot and reserve the run's worst case. Not cancellable: a claim made must
    // be known. No applied version: rejected, before any claim, reservation or model call.
    const first = await shield.run(() =>
      bookkeeping.claimAndReserve({ ...head, taskId, fingerprint, unexpectedFields, supersedesRunId: task.retry?.supersedesRunId }),
    );
    if ('rejected' in first) {
      log.warn('run rejected: no applied version', { taskId, reason: first.rejected });
      return { status: 'rejected', ...head, rejected: first.rejected };
    }
    const { claim, decision: firstDecision, definition } = first;
    // No decision: another execution owns the claim (a native backfill, a re-created schedule, a second deployment).
    if (!firstDecision) {
      log.info('slot already claimed by another execution; stopping as duplicate', { idempotencyKey, owner: claim.ownerWorkflowRunId });
      return { status: 'duplicate', ...head, generation: claim.generation, ownerRunId: claim.ownerWorkflowRunId };
    }
    const { userId, model, embeddingModel, maxOutputTokens, simulate, serviceTier, maxCostPerRun, input: prompt } = definition;
    // (undefined fields never reach an activity: payloads are JSON)
    const budget: ReserveRunInput = { workflowId, runId, userId, model, embeddingModel, prompt, maxOutputTokens, simulate, serviceTier };
    if (maxCostPerRun) budget.maxCostPerRun = maxCostPerRun;
    reserved = true;
    const { decision, waitedSeconds } =
      firstDecision.tier === 'wait' ? await awaitReservations(budget, firstDecision) : { decision: firstDecision };
    upsertSearchAttributes([{ key: { name: SEARCH_ATTRIBUTES.tier, type: 'KEYWORD' }, value: decision.tier }]);
    const who = { workflowId, runId, taskId, userId };
    const deliveries = deliverEvents(decision.eventIds);
    const run: Run = {
      ...head,
      generation: claim.generation,
      who,
      budget,
      deliveries,
      shield,
      onBudgetExhausted: definition.onBudgetExhausted,
    };
    const waited = waitedSeconds === undefined ? {} : { waitedSeconds };
    if (decision.tier === 'blocked') return await endBlocked(run, { ...reasonOf(decision), ...waited });
    run.budget = { ...budget, model: decision.models?.chat ?? model, embeddingModel: decision.models?.embed ?? embeddingModel };
    const downgraded = downgradeOf(decision, waitedSeconds);

    // 2. and 3. Call and book the chat, then the embedding of its reply. The embedding's booking is the last step: it
    // also stores the memory (its embedding read from where the embed step stored it) and closes the claim.
    const step = { simulate, maxOutputTokens: maxOutputTokens ?? DEFAULT_MAX_OUTPUT_TOKENS };
    const chat = await callAndBook(run, 'chat', { ...step, step: 'chat', model: run.budget.model, text: prompt, serviceTier });
    if ('blocked' in chat) return await endBlocked(run, chat.blocked);
    const text = chat.outcome.text ?? '';
    const completion = ({ vector, inputTruncatedFrom }: ModelCallOutcome): CompletedRunInput => ({
      memory: { ...who, content: text, embedding: vector, inputTruncatedFrom },
      idempotencyKey,
      tier: decision.tier,
      ...(downgraded ? { budget: downgraded } : {}),
    });
    const embed = await callAndBook(run, 'embedding', { ...step, step: 'embed', model: run.budget.embeddingModel, text }, completion);
    if ('blocked' in embed) return { ...(await endBlocked(run, embed.blocked)), chatCostUsd: costOf(chat.booked) };

    await run.deliveries;
    return {
      status: 'completed',
      ...head,
      generation: claim.generation,
      tier: decision.tier,
      ...(downgraded ? { downgraded } : {}),
      chatCostUsd: costOf(chat.booked),
      embeddingCostUsd: costOf(embed.booked),
      embeddingInputTruncatedFrom: embed.outcome.inputTruncatedFrom,
    };
  } catch (err) {
    // Failed or cancelled: the claim is closed as such, even while the workflow is being cancelled, and what the run
    // still holds goes back to the budget (booked calls settled theirs). A terminate or a timeout runs no workflow
    // code: `runs` shows such a claim as stale.
    const status = isCancellation(err) ? 'cancelled' : 'failed';
    await shield.run(async () => {
      if (reserved) await bookkeeping.releaseBudget({ runId });
      await bookkeeping.completeRun({ idempotencyKey, status, error: messageOf(err) });
    });
    throw err;
  }
}

/**
 * Calls the provider for one step, then books what it answered. Once the call activity returned, its usage is in
 * history and the booking retries without limit, so no database trouble makes the call happen again or get lost. A
 * billed failure is booked as failed and the step called again (a new charge: it reserves again first, on the run's
 * models, or the run ends blocked), with the next attempt number, up to MAX_CALLS_PER_STEP calls. With `completion`
 * the answered call's booking also completes the run (bookUsageAndCompleteRun): the call's result is in history before
 * that local step runs, and each part of it is idempotent, so a re-run repeats none of them.
 */
async function callAndBook(
  run: Run,
  kind: 'chat' | 'embedding',
  base: Omit<ModelCallInput, 'attempt'>,
  completion?: (answer: ModelCallOutcome) => CompletedRunInput,
): Promise<{ outcome: ModelCallOutcome; booked: BookUsageResult } | { blocked: BudgetReason }> {
  for (let attempt = 1; ; attempt++) {
    if (attempt > 1) {
      const again = await bookkeeping.reserveBudget({ ...run.budget, again: { step: base.step, attempt } });
      run.deliveries = deliverEvents('eventIds' in again ? again.eventIds : undefined, run.deliveries); // (a call made again never waits)
      if (again.tier === 'blocked') return { blocked: { ...reasonOf(again), blockedBefore: `${base.step} call ${attempt}` } };
    }
    const input: ModelCallInput = { ...base, attempt };
    const outcome = await (kind === 'chat' ? modelCalls.callChat(input) : modelCalls.callEmbedding(input));
    const { usage, providerModel, requestId, inputTruncatedFrom, receivedAt } = outcome;
    const status: BookUsageInput['status'] = outcome.outcome === 'answered' ? 'ok' : 'failed';
    const call = { ...run.who, step: base.step, attempt, model: base.model, kind, status };
    const booking: BookUsageInput = { ...call, usage, providerModel, requestId, inputTruncatedFrom, receivedAt };
    const answered = outcome.outcome === 'answered';
    const booked = await run.shield.run(() =>
      answered && completion ? bookkeeping.bookUsageAndCompleteRun({ ...completion(outcome), booking }) : bookkeeping.bookUsage(booking),
    );
    if (answered) {
      if (booked.booked === 'exception') {
        const message = `${base.step}: usage kept in usage_exceptions, not the ledger: ${booked.reason}`;
        throw ApplicationFailure.nonRetryable(message, 'UnbookableUsage');
      }
      return { outcome, booked };
    }
    log.warn('billed call failed; booked as failed', { step: base.step, attempt, error: outcome.error });
    if (attempt >= MAX_CALLS_PER_STEP) {
      const message = `${base.step}: ${attempt} calls were billed and failed (last: ${outcome.error ?? 'unknown'}); giving up`;
      throw ApplicationFailure.nonRetryable(message, 'BilledFailuresExhausted');
    }
  }
}
