import {
  ActivityCancellationType,
  type ActivityOptions,
  type LocalActivityOptions,
  ApplicationFailure,
  CancellationScope,
  isCancellation,
  log,
  patched,
  proxyActivities,
  proxyLocalActivities,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import type { ReserveRunInput } from '../activities/budget-activities';
import type { ReserveDecision } from '../budgets/reserve';
import { DEFAULT_MAX_OUTPUT_TOKENS, SEARCH_ATTRIBUTES } from '../constants';
import type { BookUsageResult, ClaimRunInput, ModelCallInput, ModelCallOutcome } from '../activities/run-activities';
import type { SimulateProfile } from '../models/simulate-profile';
import { manualKey, manualTimeOf, scheduledTimeOf, slotKey } from './scheduled-time';

/** The schedule action's argument: everything a run needs, so editing a task edits the schedule, not the code. */
export interface ScheduledRunInput {
  taskId: string;
  userId: string;
  input: string;
  model: string;
  embeddingModel: string;
  /** The reply's token cap (max_completion_tokens); absent on schedules applied before the budget guard: the default. */
  maxOutputTokens?: number;
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
  /**
   * The code path this input was written for, named by the newest patch on it (CURRENT_RUN_SHAPE). Schedules applied,
   * manual runs and retries started since it was added carry it, and such a run takes that path without asking
   * `patched()`, so it records no patch markers. Inputs without it (schedules applied before, and the executions they
   * started) take the path `patched()` gives them, as before.
   */
  shape?: string;
}

export interface ScheduledRunResult {
  status: 'completed' | 'duplicate' | 'blocked';
  /** The budget tier the run ran at (runs under the budget guard). */
  tier?: 'default' | 'cheap' | 'blocked';
  /** A blocked run's reason: the limit, spent and reserved it was decided on, and its worst case (USD, exact). */
  budget?: BudgetReason;
  idempotencyKey: string;
  scheduledMinute: string;
  /** Which execution of the slot this was (1 = first; a retry that took the claim over is 2, 3, ...). */
  generation?: number;
  /** True for a manual trigger (`tasks trigger`), which claimed its own key, not a slot. */
  manual?: boolean;
  /** A duplicate: the execution (Temporal run ID) that owns the claim. */
  ownerRunId?: string;
  chatCostUsd?: string;
  embeddingCostUsd?: string;
  /** The reply was longer than the embedding model accepts: its token count; the embedding covers the first tokens only. */
  embeddingInputTruncatedFrom?: number;
}

/**
 * The patch that split calling from booking, gave claims generations and ledger keys Temporal's run ID. Executions
 * that started before it replay (and finish) on the old sequence, kept below as `legacyScheduledRun`.
 */
export const CALL_THEN_BOOK_PATCH = 'call-then-book';

/**
 * The patch that put the budget guard before the model calls: reserve (and pick the tier) after the claim, run on the
 * tier's models, release on every exit that did not book. Executions that started before it replay without it.
 */
export const BUDGET_GUARD_PATCH = 'budget-guard';

/**
 * The patch that made the short bookkeeping steps local activities (see `localBookkeeping`), and that ends a run
 * whose budget runs out before a call made again as `blocked` instead of failing it. Executions that started before
 * it replay on normal activities and keep failing with BudgetExhausted there.
 */
export const LOCAL_BOOKKEEPING_PATCH = 'local-bookkeeping';

/**
 * The patch that folded the run's first budget reservation into its claim: one local activity (claimAndReserve), one
 * transaction, one commit, instead of a claim and then a reservation (BENCHMARKS.md, budget guard). Only inside the
 * local-bookkeeping path; executions that started before it replay on claimRun then reserveBudget.
 */
export const CLAIM_WITH_RESERVE_PATCH = 'claim-with-reserve';

/**
 * The shape a run takes when its input names it (ScheduledRunInput.shape): every patch above applied, the newest being
 * claim-with-reserve. Deciding the path from the input instead of `patched()` is as deterministic (the input is the
 * first event of the history), and a new execution then records no patch markers: three markers and the three
 * TemporalChangeVersion search attribute upserts the SDK adds to them, 7 to 9 % of the dev server's CPU per run (bench/
 * server-cpu-per-run.ts --a-workflow bareRunPatched). The current shape also ends a completed run with one local
 * activity, storeMemoryAndCompleteRun, where the patched path runs storeMemory then completeRun: one workflow command
 * and one database round trip less. A later change to this path goes behind a new `patched()` check (or a new shape),
 * like any change to running workflow code.
 */
export const CURRENT_RUN_SHAPE = CLAIM_WITH_RESERVE_PATCH;

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

/**
 * A provider answer that carried usage but failed (BilledCallError) is booked as failed and the step called again,
 * under the next attempt number. This many calls per step at most, so a provider that keeps billing broken replies
 * can't drain a budget.
 */
export const MAX_CALLS_PER_STEP = 5;

/**
 * Claim, close and memory writes: idempotent, retried without limit (no maximumAttempts) (a database outage delays them,
 * never fails the run). Normal activities: what executions started before LOCAL_BOOKKEEPING_PATCH replay.
 */
const bookkeeping = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
});

/** Threshold events: at least once, with backoff; a webhook that stays down never fails the run. */
const budgetEvents = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
});

/** Booking a call's usage: idempotent on its ledger key, so retried without limit; it never calls the provider. */
const booking = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
});

/**
 * Since LOCAL_BOOKKEEPING_PATCH: the short database steps of a run (claim, budget reservation and release, booking,
 * memory, completion) run as local activities, in the worker that runs the workflow task, without a round trip through
 * the server each (a run went from 9 workflow tasks and 8 activity tasks to 3 and 2, its history to about half the events).
 *
 * What changes, and why each of these steps stays safe:
 * - A local activity's result becomes durable only when the workflow task that ran it completes (as a marker in
 *   history). A worker that dies before that loses the result, and the next worker replays and runs the step again.
 *   So every local step must be idempotent, and each is, on a key that a re-run repeats:
 *   - claimRun: the slot's unique key decides; the same execution (Temporal run ID) running it again is told it owns
 *     the claim, never that it is a duplicate. One run per slot is PostgreSQL's guarantee, local or not.
 *   - reserveBudget: keyed `<runId>:<step>:<attempt>`; a re-run returns the reservation already made (same tier, same
 *     models). Threshold events recorded by a lost first try are not returned again: they stay undelivered in
 *     budget_events, as with a normal activity whose completion was lost.
 *   - claimAndReserve (since CLAIM_WITH_RESERVE_PATCH): both of the above in one statement; a re-run gets the claim
 *     (the owner's answer) and then the reservation already made, and a lost claim reserves nothing.
 *   - bookUsage: the ledger key. Its input is the call activity's result, already in history before the booking
 *     starts, so a crash can delay a booking and never lose it; the re-run finds its row (a LedgerConflictError only if
 *     the key holds a different call).
 *   - storeMemory (on conflict do nothing), completeRun and releaseBudget (they change only what is still open and
 *     owned by this execution).
 * - Retries: no maximumAttempts and no scheduleToCloseTimeout, so unlimited, as before. Backoffs under
 *   localRetryThreshold (1 minute) wait inside the workflow task; a longer one becomes a durable timer. A database
 *   outage is a wait, never a failed run or a repeated call.
 * - A workflow task times out after 10 s. While a local activity runs longer (a slow database), the SDK heartbeats the
 *   workflow task (completes it and asks for the next one at 80 % of the timeout) so the server does not hand the
 *   run to another worker. If that worker is too slow even for this and another one takes the task over, both run
 *   the step: harmless for the keys above.
 * What stays a normal activity:
 * - The model calls (`modelCalls`): the provider bills each request. A call's answer must be in history the moment it
 *   exists, and a dead worker's call must be noticed within the 30 s heartbeat timeout; local activities can't
 *   heartbeat, and one lost with its worker would be called (and billed) again by the replay.
 * - Threshold event deliveries (`budgetEvents`): an outside webhook that may stay down for minutes, off the run's
 *   critical path; a local activity would hold the workflow task open for it.
 */
export const LOCAL_BOOKKEEPING_OPTIONS: LocalActivityOptions = {
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
};
const localBookkeeping = proxyLocalActivities<Activities>(LOCAL_BOOKKEEPING_OPTIONS);

/**
 * Model calls retry on a time budget, not a count: a provider outage of many minutes must not fail the run.
 * - scheduleToCloseTimeout 30 minutes: the whole budget of one call, all retries included.
 * - startToCloseTimeout 2 minutes per request (the OpenAI client's own timeout is 90 s).
 * - heartbeatTimeout 30 s: the activity heartbeats every 5 s while it waits, so a dead worker's call is retried
 *   within about 30 s, and a cancel reaches the request.
 * - backoff 1 s, doubling, capped at 2 minutes; a Retry-After from the provider replaces the next delay
 *   (ApplicationFailure nextRetryDelay).
 * - WAIT_CANCELLATION_COMPLETED: on cancel, wait for the call to end, so an answer that did come back is still booked.
 * What can't be fixed by retrying is thrown non-retryable by the activity itself; no error types are listed here.
 * - Dispatched eagerly (allowEagerDispatch, the default, with the servers' system.enableActivityEagerExecution): the
 *   worker that scheduled the call usually gets it back in the answer to its workflow task, without matching. The
 *   timeouts above hold as for any activity, so a call held by a worker that dies is retried on another.
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
 * One agent run for one schedule slot (or one manual trigger). It first claims the slot in PostgreSQL: if another
 * execution already has it (a native backfill, a re-created schedule, a second deployment), this one ends as
 * `duplicate` before any model call. A retry (input.retry) may take over a claim that did not complete.
 */
export async function scheduledRun(task: ScheduledRunInput): Promise<ScheduledRunResult> {
  // An input that names the current shape takes it without patch checks (CURRENT_RUN_SHAPE says why).
  const current = task.shape === CURRENT_RUN_SHAPE;
  if (!current && !patched(CALL_THEN_BOOK_PATCH)) return legacyScheduledRun(task);
  // The patch check comes before the first command, the claim, which it turns from an activity into a local one.
  const local = current || patched(LOCAL_BOOKKEEPING_PATCH);
  // One scope for every step a cancel must not interrupt (the claim, the bookings, the closing steps), made once: each
  // scope costs the workflow promises, and the SDK records a stack trace for every promise a workflow creates.
  const shield = new CancellationScope({ cancellable: false });
  const steps: Steps = local
    ? { bookkeeping: localBookkeeping, booking: localBookkeeping, local, shield }
    : { bookkeeping, booking, local, shield };
  const info = workflowInfo();
  const manual = task.manual === true;
  const at = manual ? manualTimeOf(info) : scheduledTimeOf(info);
  const idempotencyKey = manual ? manualKey(task.taskId, at) : slotKey(task.taskId, at);
  const scheduledMinute = `${at.toISOString().slice(0, 16)}Z`;
  const kind = manual ? { manual: true } : {};
  let budget: BudgetGuard | undefined;

  try {
    const claimInput: ClaimRunInput = {
      idempotencyKey,
      taskId: task.taskId,
      userId: task.userId,
      scheduledMinute,
      ...kind,
      ...(task.retry ? { supersedesRunId: task.retry.supersedesRunId } : {}),
    };
    const budgetInput: ReserveRunInput = {
      workflowId: info.workflowId,
      runId: info.runId,
      userId: task.userId,
      model: task.model,
      embeddingModel: task.embeddingModel,
      prompt: task.input,
      ...(task.maxOutputTokens === undefined ? {} : { maxOutputTokens: task.maxOutputTokens }),
      ...(task.simulate ? { simulate: task.simulate } : {}),
    };
    // Since CLAIM_WITH_RESERVE_PATCH (checked before the first command, which it changes) the claim and the first
    // reservation are one step; before it, and before LOCAL_BOOKKEEPING_PATCH, the reservation follows the claim.
    const folded = local && (current || patched(CLAIM_WITH_RESERVE_PATCH));
    // Not cancellable: a claim that is made must be known, so that a cancel can close it as cancelled.
    const { claim, decision: foldedDecision } = await shield.run(() =>
      folded
        ? localBookkeeping.claimAndReserve({ ...claimInput, budget: budgetInput })
        : steps.bookkeeping.claimRun(claimInput).then((c) => ({ claim: c, decision: null })),
    );
    if (!claim.claimed) {
      log.info('slot already claimed by another execution; stopping as duplicate', { idempotencyKey, owner: claim.ownerWorkflowRunId });
      return {
        status: 'duplicate',
        idempotencyKey,
        scheduledMinute,
        ...kind,
        generation: claim.generation,
        ownerRunId: claim.ownerWorkflowRunId,
      };
    }

    const step = { workflowId: info.workflowId, runId: info.runId, taskId: task.taskId, userId: task.userId, simulate: task.simulate };
    let models = { chat: task.model, embed: task.embeddingModel };
    if (folded || patched(BUDGET_GUARD_PATCH)) {
      const decision = foldedDecision ?? (await steps.bookkeeping.reserveBudget(budgetInput));
      upsertSearchAttributes([{ key: { name: SEARCH_ATTRIBUTES.tier, type: 'KEYWORD' }, value: decision.tier }]);
      budget = { input: budgetInput, tier: decision.tier, deliveries: deliverEvents(decision.eventIds) };
      if (decision.tier === 'blocked') {
        const reason = reasonOf(decision);
        log.warn('budget exhausted: run blocked before any model call', { ...reason });
        await steps.bookkeeping.completeRun({ idempotencyKey, status: 'blocked', tier: 'blocked', budget: { ...reason } });
        await budget.deliveries;
        return {
          status: 'blocked',
          idempotencyKey,
          scheduledMinute,
          ...kind,
          generation: claim.generation,
          tier: 'blocked',
          budget: reason,
        };
      }
      models = { chat: decision.models.chat ?? task.model, embed: decision.models.embed ?? task.embeddingModel };
      budget.input = { ...budgetInput, model: models.chat, embeddingModel: models.embed };
    }
    const guarded = budget ? { maxOutputTokens: budget.input.maxOutputTokens ?? DEFAULT_MAX_OUTPUT_TOKENS } : {};
    const chat = await callAndBook(steps, 'chat', { ...step, ...guarded, step: 'chat', model: models.chat, text: task.input }, budget);
    const run = { idempotencyKey, scheduledMinute, kind, generation: claim.generation };
    if ('blocked' in chat) return await blockedMidRun(steps, chat.blocked, run, budget);
    const embed = await callAndBook(
      steps,
      'embedding',
      { ...step, ...guarded, step: 'embed', model: models.embed, text: chat.outcome.text ?? '' },
      budget,
    );
    if ('blocked' in embed) return { ...(await blockedMidRun(steps, embed.blocked, run, budget)), chatCostUsd: costOf(chat.booked) };
    const memory = {
      workflowId: info.workflowId,
      runId: info.runId,
      taskId: task.taskId,
      userId: task.userId,
      content: chat.outcome.text ?? '',
      embedding: embed.outcome.vector ?? [],
      ...(embed.outcome.inputTruncatedFrom === undefined ? {} : { inputTruncatedFrom: embed.outcome.inputTruncatedFrom }),
    };
    const tier = budget ? { tier: budget.tier } : {};
    if (current) {
      // the current shape stores the memory and closes the claim in one local activity (one statement)
      await localBookkeeping.storeMemoryAndCompleteRun({ memory, idempotencyKey, ...tier });
    } else {
      await steps.bookkeeping.storeMemory(memory);
      await steps.bookkeeping.completeRun({ idempotencyKey, status: 'completed', ...tier });
    }
    if (budget?.deliveries) await budget.deliveries;
    return {
      status: 'completed',
      idempotencyKey,
      scheduledMinute,
      ...kind,
      generation: claim.generation,
      ...(budget ? { tier: budget.tier } : {}),
      chatCostUsd: costOf(chat.booked),
      embeddingCostUsd: costOf(embed.booked),
      ...(embed.outcome.inputTruncatedFrom === undefined ? {} : { embeddingInputTruncatedFrom: embed.outcome.inputTruncatedFrom }),
    };
  } catch (err) {
    // Cancelled or failed, the claim is closed as such, even while the workflow is being cancelled. (A terminate or
    // a timeout runs no workflow code: `runs` shows such a claim as stale.)
    const status = isCancellation(err) ? 'cancelled' : 'failed';
    await shield.run(async () => {
      // What the run still holds goes back to the user's budget; booked calls were settled by their booking.
      if (budget) await steps.bookkeeping.releaseBudget({ runId: info.runId });
      await steps.bookkeeping.completeRun({ idempotencyKey, status, error: messageOf(err) });
    });
    throw err;
  }
}

/**
 * Calls the provider for one step and books what it answered. Calling and booking are separate activities: once the
 * call activity returned, its usage is in history, and booking it retries without limit, so no database trouble can
 * make the call happen again or get lost. A billed failure is booked as failed and the step called again, with the
 * next attempt number (a new ledger key), up to MAX_CALLS_PER_STEP calls.
 */
async function callAndBook(
  steps: Steps,
  kind: 'chat' | 'embedding',
  base: Omit<ModelCallInput, 'attempt'>,
  budget?: BudgetGuard,
): Promise<{ outcome: ModelCallOutcome; booked: BookUsageResult } | { blocked: BudgetReason }> {
  for (let attempt = 1; ; attempt++) {
    if (budget && attempt > 1) {
      // A call made again is a new charge: it reserves again, on the run's models, or the run stops here.
      const again = await steps.bookkeeping.reserveBudget({ ...budget.input, again: { step: base.step, attempt } });
      // Thresholds this reservation crossed are delivered too (since the patch; before it they waited for a sweeper).
      if (steps.local) budget.deliveries = deliverEvents(again.eventIds, budget.deliveries);
      if (again.tier === 'blocked') {
        // Since LOCAL_BOOKKEEPING_PATCH the run ends `blocked`, like a run blocked before its first call: the user's
        // budget ran out, nothing failed. Before it, the run failed (kept for the executions that replay it).
        if (steps.local) return { blocked: { ...reasonOf(again), blockedBefore: `${base.step} call ${attempt}` } };
        throw ApplicationFailure.nonRetryable(
          `${base.step}: budget exhausted before call ${attempt} (${JSON.stringify(reasonOf(again))})`,
          'BudgetExhausted',
        );
      }
    }
    const input: ModelCallInput = { ...base, attempt };
    const outcome = await (kind === 'chat' ? modelCalls.callChat(input) : modelCalls.callEmbedding(input));
    const booked = await steps.shield.run(() =>
      steps.booking.bookUsage({
        workflowId: base.workflowId,
        runId: base.runId,
        step: base.step,
        attempt,
        taskId: base.taskId,
        userId: base.userId,
        model: base.model,
        kind,
        status: outcome.outcome === 'answered' ? 'ok' : 'failed',
        usage: outcome.usage,
        providerModel: outcome.providerModel,
        requestId: outcome.requestId,
        ...(outcome.inputTruncatedFrom === undefined ? {} : { inputTruncatedFrom: outcome.inputTruncatedFrom }),
        // activity input only (no new command): executions recorded before it replay unchanged
        ...(outcome.receivedAt === undefined ? {} : { receivedAt: outcome.receivedAt }),
      }),
    );
    if (outcome.outcome === 'answered') {
      if (booked.booked === 'exception') {
        throw ApplicationFailure.nonRetryable(
          `${base.step}: usage kept in usage_exceptions, not the ledger: ${booked.reason}`,
          'UnbookableUsage',
        );
      }
      return { outcome, booked };
    }
    log.warn('billed call failed; booked as failed', { step: base.step, attempt, error: outcome.error });
    if (attempt >= MAX_CALLS_PER_STEP) {
      throw ApplicationFailure.nonRetryable(
        `${base.step}: ${attempt} calls were billed and failed (last: ${outcome.error ?? 'unknown'}); giving up`,
        'BilledFailuresExhausted',
      );
    }
  }
}

/** Where the bookkeeping steps run: normal activities (before LOCAL_BOOKKEEPING_PATCH) or local ones. */
interface Steps {
  bookkeeping: typeof bookkeeping;
  booking: typeof booking;
  local: boolean;
  /** The run's non-cancellable scope, for the steps a cancel must not interrupt. */
  shield: CancellationScope;
}

/**
 * The budget ran out before a call made again (after a billed failure): no further call. What the run still holds
 * goes back to the user's budget, the claim is closed `blocked` with the reason, and the workflow completes with a
 * blocked result. Calls already made stay booked (their ledger rows settled their reservations).
 */
async function blockedMidRun(
  steps: Steps,
  reason: BudgetReason,
  run: { idempotencyKey: string; scheduledMinute: string; kind: { manual?: boolean }; generation: number },
  budget?: BudgetGuard,
): Promise<ScheduledRunResult> {
  log.warn('budget exhausted before a call made again: run blocked, no further call', { ...reason });
  upsertSearchAttributes([{ key: { name: SEARCH_ATTRIBUTES.tier, type: 'KEYWORD' }, value: 'blocked' }]);
  await steps.shield.run(async () => {
    await steps.bookkeeping.releaseBudget({ runId: workflowInfo().runId });
    await steps.bookkeeping.completeRun({ idempotencyKey: run.idempotencyKey, status: 'blocked', tier: 'blocked', budget: { ...reason } });
  });
  await budget?.deliveries;
  return {
    status: 'blocked',
    idempotencyKey: run.idempotencyKey,
    scheduledMinute: run.scheduledMinute,
    ...run.kind,
    generation: run.generation,
    tier: 'blocked',
    budget: reason,
  };
}

interface BudgetGuard {
  /** The reservation request, with the models the decision picked. */
  input: ReserveRunInput;
  tier: 'default' | 'cheap' | 'blocked';
  /** Threshold events being delivered (none: undefined); awaited before the run returns. */
  deliveries: Promise<unknown> | undefined;
}

const reasonOf = (d: ReserveDecision): BudgetReason => ({
  limitUsd: d.limitUsd,
  spentUsd: d.spentUsd,
  reservedUsd: d.reservedUsd,
  worstCaseUsd: d.worstCaseUsd,
  month: d.month,
  timeZone: d.timeZone,
});

/**
 * Delivers the threshold events a decision recorded, after (or beside) the deliveries already under way; a delivery that
 * keeps failing is logged, never fatal. No events (nearly every decision): no new promise, since every promise a
 * workflow creates costs the SDK a stack trace.
 */
function deliverEvents(eventIds: string[], underWay?: Promise<unknown>): Promise<unknown> | undefined {
  if (eventIds.length === 0) return underWay;
  const these = Promise.all(
    eventIds.map((eventId) =>
      budgetEvents
        .deliverBudgetEvent({ eventId })
        .catch((err: unknown) => log.error('budget event not delivered', { eventId, error: messageOf(err) })),
    ),
  );
  return underWay ? Promise.all([underWay, these]) : these;
}

const costOf = (b: BookUsageResult): string | undefined => (b.booked === 'ledger' ? b.costUsd : undefined);

/** The innermost message: an ActivityFailure's own message only names the activity. */
function messageOf(err: unknown): string {
  let e: unknown = err;
  while (e instanceof Error && e.cause instanceof Error) e = e.cause;
  return e instanceof Error ? e.message : String(e);
}

// ---------------------------------------------------------------------------------------------------------------
// Before CALL_THEN_BOOK_PATCH. Unchanged command sequence (claimRun, chat, embedMemory, completeRun), so executions
// that started on it replay and finish. Remove once no such execution is open and their histories have aged out.
// ---------------------------------------------------------------------------------------------------------------

const legacyModelCalls = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 5 },
});

async function legacyScheduledRun(task: ScheduledRunInput): Promise<ScheduledRunResult> {
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
    const chat = await legacyModelCalls.chat({ ...step, step: 'chat', model: task.model, text: task.input });
    const memory = await legacyModelCalls.embedMemory({ ...step, step: 'embed', model: task.embeddingModel, text: chat.text });
    await bookkeeping.completeRun({ idempotencyKey, status: 'completed' });
    return { status: 'completed', idempotencyKey, scheduledMinute, chatCostUsd: chat.costUsd, embeddingCostUsd: memory.costUsd };
  } catch (err) {
    const message = err instanceof Error ? (err.cause instanceof Error ? err.cause.message : err.message) : String(err);
    await bookkeeping.completeRun({ idempotencyKey, status: 'failed', error: message });
    throw err;
  }
}
