import {
  ActivityCancellationType,
  type ActivityOptions,
  type LocalActivityOptions,
  ApplicationFailure,
  CancellationScope,
  isCancellation,
  log,
  proxyActivities,
  proxyLocalActivities,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import type { ReserveRunInput, RunDecision } from '../activities/budget-activities';
import type { BookUsageInput, BookUsageResult, ModelCallInput, ModelCallOutcome, CompletedRunInput } from '../activities/run-activities';
import { DEFAULT_MAX_OUTPUT_TOKENS, SEARCH_ATTRIBUTES } from '../constants';
import { manualKey, manualTimeOf, scheduledTimeOf, slotKey } from './scheduled-time';
import { costOf, downgradeOf, messageOf, reasonOf } from './run-results';
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
 * The database steps (claim with the first reservation, bookings, reservations for calls made again, release,
 * completion) are local activities: they run in the worker that runs the workflow task, with no round trip through
 * the server. A local activity's result is durable only once its workflow task completes, so a worker that dies first
 * makes the next one run the step again; each step is idempotent on a key the re-run repeats (the slot's claim key
 * and run ID, the ledger key `<runId>:<step>:<attempt>`, the reservation's key, the memory once per execution), and a
 * booking's input is a call result already in history, so a crash delays a booking and never loses it. Retried
 * without limit: a database outage is a wait, never a failed run or a repeated call. Backoffs under a minute wait in
 * the workflow task (the SDK heartbeats it), longer ones become durable timers.
 */
export const LOCAL_BOOKKEEPING_OPTIONS: LocalActivityOptions = {
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
};
const bookkeeping = proxyLocalActivities<Activities>(LOCAL_BOOKKEEPING_OPTIONS);

/**
 * The model calls are activities: the provider bills each request, so its answer must be in history the moment it
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

/** Threshold events go to an outside webhook that may stay down for minutes: activities, off the run's path, 20 tries. */
const budgetEvents = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
});

/**
 * How a run whose first decision waits for other runs' open reservations asks again: after a durable timer, the first
 * 1 s, doubling to at most 30 s, until it has waited the worker's longest (waitMaxSeconds, CRONLEDGER_BUDGET_WAIT_MAX).
 */
export const BUDGET_WAIT_BACKOFF = { initialMs: 1_000, maximumMs: 30_000 };

/**
 * Pausing a task's schedule for budget talks to Temporal, so it is an activity; off the money path, a few tries, and a
 * failure only logged: the task's next blocked run pauses it.
 */
const schedulePausing = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 5 },
});

/** A claimed run, as its later steps need it. */
interface Run {
  idempotencyKey: string;
  scheduledMinute: string;
  manual?: boolean;
  generation: number;
  who: { workflowId: string; runId: string; taskId: string; userId: string };
  /** The reservation request, on the models the decision picked; a call made again reserves with it. */
  budget: ReserveRunInput;
  /** Threshold events being delivered (none: undefined); awaited before the run returns. */
  deliveries: Promise<unknown> | undefined;
  /** The steps a cancel must not interrupt (claim, bookings, closing steps) run in this scope. */
  shield: CancellationScope;
  /** The task's onBudgetExhausted: 'pause' pauses its schedule when the budget blocks the run. */
  onBudgetExhausted?: 'block' | 'pause';
}

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
 * Other runs' open reservations alone keep the run's first decision from its tier ('wait'): it asks again after a
 * durable timer, backing off (BUDGET_WAIT_BACKOFF), until they have settled and it is decided as it would be alone, or
 * until it has waited waitMaxSeconds; then it is decided counting them (reason 'waited-for-reservations'). Timers, not
 * the decision's local-activity retry: the wait's start and every timer are in history, so the bound holds across
 * worker restarts and a long wait holds no worker slot, where a retrying local activity keeps its attempts in the
 * worker's memory until it completes.
 */
async function awaitReservations(
  budget: ReserveRunInput,
  first: RunDecision & { tier: 'wait' },
): Promise<{ decision: Exclude<RunDecision, { tier: 'wait' }>; waitedSeconds: number }> {
  const started = Date.now();
  const until = started + first.waitMaxSeconds * 1000;
  log.info("budget decision waits for other runs' open reservations", {
    reservedUsd: first.reservedUsd,
    waitMaxSeconds: first.waitMaxSeconds,
  });
  for (let delay = BUDGET_WAIT_BACKOFF.initialMs; ; delay = Math.min(delay * 2, BUDGET_WAIT_BACKOFF.maximumMs)) {
    if (Date.now() < until) await sleep(Math.min(delay, until - Date.now()));
    const decision = await bookkeeping.reserveBudget(Date.now() >= until ? { ...budget, waited: true } : budget);
    if (decision.tier !== 'wait') return { decision, waitedSeconds: Math.round((Date.now() - started) / 1000) };
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

/**
 * The budget does not fit the run (before its first call) or a call made again: no further call. What the run still
 * holds goes back to the budget, the claim closes `blocked` with the reason, and the workflow completes. Calls already
 * made stay booked. A task with onBudgetExhausted "pause" whose money ran out (not its maxCostPerRun, which no month
 * changes) has its schedule paused until the budget sweeper resumes it.
 */
async function endBlocked(run: Run, reason: BudgetReason): Promise<ScheduledRunResult> {
  log.warn('budget exhausted: run blocked, no further model call', { ...reason });
  if (reason.blockedBefore) upsertSearchAttributes([{ key: { name: SEARCH_ATTRIBUTES.tier, type: 'KEYWORD' }, value: 'blocked' }]);
  await run.shield.run(async () => {
    if (reason.blockedBefore) await bookkeeping.releaseBudget({ runId: workflowInfo().runId });
    await bookkeeping.completeRun({ idempotencyKey: run.idempotencyKey, status: 'blocked', tier: 'blocked', budget: { ...reason } });
  });
  if (run.onBudgetExhausted === 'pause' && reason.reason !== 'max-cost-per-run') {
    const { taskId, userId } = run.who;
    const { month, timeZone, limitUsd } = reason;
    await schedulePausing
      .pauseTaskForBudget({ taskId, userId, month, timeZone, limitUsd })
      .catch((err: unknown) =>
        log.error('task not paused for budget; its next blocked run tries again', { taskId, error: messageOf(err) }),
      );
  }
  await run.deliveries;
  const { idempotencyKey, scheduledMinute, manual, generation } = run;
  return { status: 'blocked', idempotencyKey, scheduledMinute, ...(manual ? { manual } : {}), generation, tier: 'blocked', budget: reason };
}

/**
 * Delivers the threshold events a decision recorded, beside the deliveries already under way; one that keeps failing
 * is logged, never fatal. No events (nearly every decision): no new promise, since the SDK records a stack trace for
 * every promise a workflow creates.
 */
function deliverEvents(eventIds: string[] | undefined, underWay?: Promise<unknown>): Promise<unknown> | undefined {
  if (!eventIds?.length) return underWay;
  const these = Promise.all(
    eventIds.map((eventId) =>
      budgetEvents
        .deliverBudgetEvent({ eventId })
        .catch((err: unknown) => log.error('budget event not delivered', { eventId, error: messageOf(err) })),
    ),
  );
  return underWay ? Promise.all([underWay, these]) : these;
}
