import { ApplicationFailure, Context, log } from '@temporalio/activity';
import { ScheduleNotFoundError, type Client, type ScheduleDescription } from '@temporalio/client';
import type pg from 'pg';
import { budgetWaitMaxSeconds, secretSetting } from '../config';
import {
  AwaitingReservationsError,
  claimAndReserve,
  reserveBudget,
  releaseReservations,
  sweepAllExpired,
  type BudgetFigures,
  type DecisionWhy,
  type PlannedCall,
  type ReserveDecision,
} from '../budgets/reserve';
import { claimRun, type ClaimOutcome } from '../db/runs';
import { appliedVersion, recordRejectedRun } from '../db/task-versions';
import { NoPriceError } from '../ledger/prices';
import { budgetEvent, recordEventDelivery, undeliveredEvents } from '../budgets/threshold-events';
import { cheapModelsEverNamed } from '../budgets/downgrades';
import { worstCaseOf } from '../budgets/worst-case';
import { budgetPausesDue, recordBudgetPause, recordBudgetResume } from '../budgets/budget-pauses';
import { DEFAULT_MAX_OUTPUT_TOKENS, taskScheduleId } from '../constants';
import { slotClaimMinutes } from '../db/runs';
import { budgetPauseReason, isBudgetPause, notePausedFor, noteResumed } from '../task-note';
import { matchingTimes } from '../temporal-reads';
import { ProviderRejectedError, type PromptCountRequest, type ServiceTier } from '../models/provider';
import type { SimulateProfile } from '../models/simulate-profile';
import { UserError } from '../errors';
import { budgetWebhookFromEnv, postJson, readWebhook, webhookId, WebhookRejectedError, webhookTarget } from '../reports/delivery';
import type { ClaimRunInput } from './run-activities';
import { monthForecast, type TaskSchedules } from '../forecast/month-forecast';
import { recordForecast } from '../forecast/forecast-records';

/** What a run takes from its applied version (task_versions): everything it spends on. */
export interface RunDefinition {
  userId: string;
  input: string;
  model: string;
  embeddingModel: string;
  maxOutputTokens?: number;
  /** Only when the worker's provider is the mock: a real provider bills real tokens, whatever a profile says. */
  simulate?: SimulateProfile;
  /** The service tier the chat call asks for; unset: standard. */
  serviceTier?: ServiceTier;
  /** The most one run's worst case may cost (USD, exact decimal string), whatever the budget; unset: no cap. */
  maxCostPerRun?: string;
  /** What the task's schedule does when its user's budget is exhausted: each run blocked (unset), or paused. */
  onBudgetExhausted?: 'block' | 'pause';
}

/** The run's first step: which applied version to load, and the claim it makes (its user comes from the version). */
export type ClaimAppliedInput = Omit<ClaimRunInput, 'userId'> & {
  fingerprint: string;
  /** Fields of the run's input that no cronledger start sets (a user, a prompt): a forged start, rejected. */
  unexpectedFields: string[];
};

export type ClaimAppliedResult =
  | { rejected: string }
  | { claim: ClaimOutcome; decision: null; definition: RunDefinition }
  | { claim: { generation: number }; decision: RunDecision; definition: RunDefinition };

/**
 * How long an unsettled reservation counts. It must outlast a call's whole budget (30 minutes of retries per model
 * call, two calls per run) plus booking through a PostgreSQL outage, so that only a run nobody will ever finish (a
 * terminated or timed-out execution) loses it: 6 hours by default.
 */
export const DEFAULT_RESERVATION_EXPIRY_SECONDS = 6 * 3600;

/**
 * How long the sweeper leaves an undelivered threshold event to the run that recorded it, and then the first pause
 * between its own attempts (doubling after each failure, at most an hour).
 */
export const DEFAULT_EVENT_RETRY_SECONDS = 60;

/** Events the sweeper delivers in one pass at most; the next pass takes the rest. */
const EVENTS_PER_SWEEP = 100;

export interface BudgetActivityDeps {
  pool: pg.Pool;
  /** Which worker process ran the activity, recorded on the claim (claimAndReserve). */
  workerId: string;
  /** Default: $CRONLEDGER_RESERVATION_EXPIRY_SECONDS, else DEFAULT_RESERVATION_EXPIRY_SECONDS. */
  reservationExpirySeconds?: number;
  /** Default: $BUDGET_WEBHOOK_URL, else $REPORT_WEBHOOK_URL; empty or unset: events are recorded, not posted. */
  budgetWebhookUrl?: string;
  /** The signing secret of budgetWebhookUrl; with the URL from the environment, the one beside it there. */
  budgetWebhookSecret?: string;
  /** Default: $CRONLEDGER_BUDGET_EVENT_RETRY_SECONDS, else DEFAULT_EVENT_RETRY_SECONDS. */
  budgetEventRetrySeconds?: number;
  /** Whether the worker's model provider is the mock, the only one a task's `simulate` profile is passed to. */
  simulateHonoured: boolean;
  /** The provider's own count of a chat prompt (ModelProvider.countPromptTokens), for models it counts. */
  countPromptTokens?: (request: PromptCountRequest) => Promise<number | undefined>;
  /** Default: $CRONLEDGER_BUDGET_WAIT_MAX (config.ts budgetWaitMaxSeconds), else 10 minutes. */
  budgetWaitMaxSeconds?: number;
  /** The clock of budget pauses and of the sweeper's resumes (tests turn the month over with it); default: now. */
  now?: () => Date;
  /**
   * The task schedules the forecast counts slots on (src/schedules/scheduled-tasks.ts, given by the worker process,
   * which holds a Temporal client); without it the sweep's forecast pass does nothing.
   */
  taskSchedules?: () => Promise<TaskSchedules>;
}

export interface ReserveRunInput {
  workflowId: string;
  runId: string;
  userId: string;
  model: string;
  embeddingModel: string;
  prompt: string;
  maxOutputTokens?: number;
  simulate?: SimulateProfile;
  serviceTier?: ServiceTier;
  /** The task's cap on one run's worst case (USD); counts on the run's first decision. */
  maxCostPerRun?: string;
  /** The run's first decision after it waited its longest for other runs' reservations: decide counting them. */
  waited?: boolean;
  /** A call made again after a billed failure: reserve that one call, on the run's models, never downgrading. */
  again?: { step: 'chat' | 'embed'; attempt: number };
}

/** A run's chat and embedding calls (attempt 1) with their worst-case usage on the requested models. */
async function plannedCalls(deps: BudgetActivityDeps, input: ReserveRunInput): Promise<PlannedCall[]> {
  const worst = worstCaseOf({
    prompt: input.prompt,
    maxOutputTokens: input.maxOutputTokens ?? DEFAULT_MAX_OUTPUT_TOKENS,
    simulate: input.simulate,
    providerPromptTokens: await providerPromptTokens(deps, input),
    serviceTier: input.serviceTier,
  });
  return [
    { step: 'chat', attempt: 1, kind: 'chat', model: input.model, worstCase: worst.chat },
    { step: 'embed', attempt: 1, kind: 'embedding', model: input.embeddingModel, worstCase: worst.embedding },
  ];
}

/**
 * The chat prompt as counted by the provider of each model the chat may be called on (its own, or a cheap model the
 * downgrade map names for it), the largest; undefined when no provider counts any of them (the o200k count stands).
 * A count the provider refuses for good fails the decision for good; one it can't give now is asked again.
 */
async function providerPromptTokens(deps: BudgetActivityDeps, input: ReserveRunInput): Promise<number | undefined> {
  const count = deps.countPromptTokens;
  if (!count) return undefined;
  const models = [input.model, ...(await cheapModelsEverNamed(deps.pool, input.model))];
  const signal = Context.current().cancellationSignal;
  const counts = await Promise.all(models.map((model) => count({ model, prompt: input.prompt, signal }))).catch((err: unknown) => {
    if (err instanceof ProviderRejectedError) throw ApplicationFailure.nonRetryable(err.message, 'ProviderRejectedError');
    throw err;
  });
  const known = counts.filter((n): n is number => n !== undefined);
  return known.length > 0 ? Math.max(...known) : undefined;
}

/**
 * What the workflow reads of a budget decision, and nothing else, since the result is kept in the run's history: the
 * tier, the models only when they are not the ones asked for (a downgrade), why when the budget's band alone did not
 * decide it, the threshold events only when there are any, and the figures only for a blocked run (its reason). 'wait':
 * other runs' open reservations alone make it worse; the run asks again later, waiting at most waitMaxSeconds (the
 * worker's setting, read here so that the workflow has it from its history).
 */
export type RunDecision =
  | (DecisionWhy & { tier: 'default' | 'cheap'; models?: Record<string, string>; eventIds?: string[] })
  | (BudgetFigures & DecisionWhy & { tier: 'blocked'; worstCaseUsd: string; eventIds?: string[] })
  | { tier: 'wait'; reservedUsd: string; waitMaxSeconds: number };

function forTheRun(decision: ReserveDecision, calls: PlannedCall[]): RunDecision {
  const events = decision.eventIds.length > 0 ? { eventIds: decision.eventIds } : {};
  const why: DecisionWhy = {
    ...(decision.reason ? { reason: decision.reason } : {}),
    ...(decision.maxCostPerRunUsd ? { maxCostPerRunUsd: decision.maxCostPerRunUsd } : {}),
  };
  if (decision.tier === 'blocked') {
    const { limitUsd, spentUsd, reservedUsd, worstCaseUsd, month, timeZone } = decision;
    return { tier: 'blocked', limitUsd, spentUsd, reservedUsd, worstCaseUsd, month, timeZone, ...why, ...events };
  }
  const downgraded = calls.some((c) => decision.models[c.step] !== c.model);
  return { tier: decision.tier, ...(downgraded ? { models: decision.models } : {}), ...why, ...events };
}

/**
 * Logs a decision that had something to decide: the user has a monthly limit, or the run does not go ahead as asked
 * (the task's cap downgraded or blocked it). A run of a user without a budget that goes ahead logs nothing: every
 * such line said the same, and each cost the SDK's logger work on every run.
 */
const logDecision = (decision: ReserveDecision): void => {
  if (decision.limitUsd === null && decision.tier === 'default') return;
  log.info('budget decision', {
    tier: decision.tier,
    worstCaseUsd: decision.worstCaseUsd,
    spentUsd: decision.spentUsd,
    reservedUsd: decision.reservedUsd,
  });
};

/**
 * What a failed decision throws to Temporal:
 * - NoPriceError: a model without a price in force cannot be reserved for, and retrying will not price it; the decision
 *   fails for good, with NoPriceError's message (the model, the instant, and `cronledger prices apply FILE` as the fix).
 * - anything else as it is (retried).
 * A decision that must wait for other runs' reservations is no failure: it comes back as tier 'wait' (waitFor).
 */
function decisionFailure(err: unknown): never {
  if (err instanceof NoPriceError) throw ApplicationFailure.nonRetryable(err.message, 'NoPriceError');
  throw err;
}

/** The blocked run's figures a budget pause names (BudgetReason's). */
export interface BudgetPauseInput {
  taskId: string;
  userId: string;
  month: string;
  timeZone: string;
  limitUsd: string | null;
}

/** A task schedule's description; undefined when it does not exist (a run started without one, a deleted task). */
const describeTaskSchedule = (client: Client, taskId: string): Promise<ScheduleDescription | undefined> =>
  client.schedule
    .getHandle(taskScheduleId(taskId))
    .describe()
    .catch((err: unknown) => {
      if (err instanceof ScheduleNotFoundError) return undefined;
      throw err;
    });

/** The schedule's slots in (from, to] that no run claimed: those a pause skipped. */
async function unclaimedSlots(client: Client, pool: pg.Pool, taskId: string, from: Date, to: Date): Promise<number> {
  if (to <= from) return 0;
  const times = (await matchingTimes(client, taskScheduleId(taskId), from, to)).filter((t) => t > from);
  const claimed = new Set((await slotClaimMinutes(pool, taskId, from, to)).map((m) => m.getTime()));
  return times.filter((t) => !claimed.has(Math.floor(t.getTime() / 60_000) * 60_000)).length;
}

export const createBudgetActivities = (deps: BudgetActivityDeps) => {
  const now = (): Date => deps.now?.() ?? new Date();
  // read once, when the worker starts: a malformed CRONLEDGER_BUDGET_WAIT_MAX stops the worker, not a run
  const waitMaxSeconds = deps.budgetWaitMaxSeconds ?? budgetWaitMaxSeconds();
  /** AwaitingReservationsError as the decision 'wait', with the longest the run may wait; anything else as it is. */
  const waitFor = (err: unknown): Extract<RunDecision, { tier: 'wait' }> => {
    if (!(err instanceof AwaitingReservationsError)) throw err;
    log.info("budget decision waits for other runs' open reservations", { reservedUsd: err.figures.reservedUsd });
    return { tier: 'wait', reservedUsd: err.figures.reservedUsd, waitMaxSeconds };
  };
  const expirySeconds = (): number =>
    deps.reservationExpirySeconds ?? (Number(process.env.CRONLEDGER_RESERVATION_EXPIRY_SECONDS) || DEFAULT_RESERVATION_EXPIRY_SECONDS);
  const eventRetrySeconds = (): number => {
    const fromEnv = Number.parseInt(process.env.CRONLEDGER_BUDGET_EVENT_RETRY_SECONDS ?? '', 10);
    return deps.budgetEventRetrySeconds ?? (Number.isInteger(fromEnv) && fromEnv >= 0 ? fromEnv : DEFAULT_EVENT_RETRY_SECONDS);
  };
  const webhook = () =>
    deps.budgetWebhookUrl === undefined
      ? budgetWebhookFromEnv()
      : readWebhook(deps.budgetWebhookUrl, deps.budgetWebhookSecret ?? secretSetting('BUDGET_WEBHOOK_SECRET'), {
          url: 'BUDGET_WEBHOOK_URL',
          secret: 'BUDGET_WEBHOOK_SECRET',
        });
  return {
    /**
     * The budget guard, before a run's first model call: decides the tier and reserves the worst case of its chat and
     * embedding calls together (so an embedding is never blocked after its chat was paid), under the month's row lock.
     * A first decision asked again after a wait ('wait' from claimAndReserve) may wait again, until `waited`. A call
     * made again (`again`) reserves that call alone, on the run's models, and never waits.
     */
    async reserveBudget(input: ReserveRunInput): Promise<RunDecision> {
      const all = await plannedCalls(deps, input);
      const calls = input.again
        ? all.filter((c) => c.step === input.again?.step).map((c) => ({ ...c, attempt: input.again?.attempt ?? 1 }))
        : all;
      try {
        const decision = await reserveBudget(deps.pool, {
          userId: input.userId,
          runId: input.runId,
          workflowId: input.workflowId,
          calls,
          mayDowngrade: !input.again,
          expirySeconds: expirySeconds(),
          maxCostPerRunUsd: input.maxCostPerRun,
          mayWait: !input.waited,
        }).catch(decisionFailure);
        logDecision(decision);
        return forTheRun(decision, calls);
      } catch (err) {
        return waitFor(err);
      }
    },

    /**
     * The run's first step. Loads the version its input names from task_versions; none (or an input with fields no
     * cronledger start sets): the run is recorded `rejected` under its own key, and nothing is claimed or reserved.
     * Else the claim and the run's first budget decision in one transaction, on the version's user, prompt and models,
     * so the guard costs no commit of its own. Not won: a duplicate, and nothing reserved (decision null, and only
     * then). Run again by the same execution (a re-run local activity), it returns the same claim and reservation. Won,
     * the claim says only its generation.
     */
    async claimAndReserve(input: ClaimAppliedInput): Promise<ClaimAppliedResult> {
      const { workflowExecution } = Context.current().info;
      if (!workflowExecution) throw ApplicationFailure.nonRetryable('claimAndReserve only runs inside a scheduledRun workflow');
      const { workflowId, runId } = workflowExecution;
      const { fingerprint, unexpectedFields, ...rest } = input;
      const taskId = String(input.taskId);
      const version =
        typeof input.taskId === 'string' && typeof fingerprint === 'string'
          ? await appliedVersion(deps.pool, taskId, fingerprint)
          : undefined;
      const rejected = !version
        ? `task ${JSON.stringify(taskId)} has no applied version with fingerprint ${JSON.stringify(fingerprint)}; only what \`cronledger tasks apply\` recorded runs`
        : unexpectedFields.length > 0
          ? `the run's input carries ${unexpectedFields.join(', ')}, which no cronledger start sets; the definition comes from the applied version only`
          : undefined;
      if (rejected || !version) {
        const reason = rejected ?? 'no applied version';
        log.warn('run rejected', { taskId, reason });
        await recordRejectedRun(deps.pool, {
          taskId,
          workflowId,
          temporalRunId: runId,
          scheduledMinute: input.scheduledMinute,
          workerId: deps.workerId,
          manual: input.manual === true,
          reason,
        });
        return { rejected: reason };
      }
      const definition: RunDefinition = {
        userId: version.userId,
        input: version.input,
        model: version.model,
        embeddingModel: version.embeddingModel,
        maxOutputTokens: version.maxOutputTokens,
        ...(version.serviceTier ? { serviceTier: version.serviceTier } : {}),
        ...(version.simulate && deps.simulateHonoured ? { simulate: version.simulate } : {}),
        ...(version.maxCostPerRun ? { maxCostPerRun: version.maxCostPerRun } : {}),
        ...(version.onBudgetExhausted ? { onBudgetExhausted: version.onBudgetExhausted } : {}),
      };
      const budget: ReserveRunInput = { workflowId, runId, ...definition, prompt: definition.input };
      const claim = { ...rest, taskId, userId: definition.userId, workflowId, temporalRunId: runId, workerId: deps.workerId };
      const calls = await plannedCalls(deps, budget);
      const reservation = { calls, expirySeconds: expirySeconds(), maxCostPerRunUsd: definition.maxCostPerRun };
      const result = await claimAndReserve(deps.pool, claim, reservation).catch(async (err: unknown) => {
        // a decision that must wait: the claim is made, and the run asks again with reserveBudget
        if (err instanceof AwaitingReservationsError && err.claim) return { claim: err.claim, decision: waitFor(err) };
        if (!(err instanceof NoPriceError)) return decisionFailure(err);
        // The statement rolled back, claim included. The claim alone, so the failure is recorded on the run (the
        // workflow closes it as failed with this message); a slot another execution owns is its business.
        const outcome = await claimRun(deps.pool, claim);
        if (!outcome.claimed) return { claim: outcome, decision: null };
        return decisionFailure(err);
      });
      if (!result.decision) return { claim: result.claim, decision: null, definition };
      if (result.decision.tier === 'wait') return { claim: { generation: result.claim.generation }, decision: result.decision, definition };
      logDecision(result.decision);
      return { claim: { generation: result.claim.generation }, decision: forTheRun(result.decision, calls), definition };
    },

    /** Every exit that did not book releases what the run still holds (failure, cancellation). Idempotent. */
    async releaseBudget(input: { runId: string }): Promise<{ released: number }> {
      return { released: await releaseReservations(deps.pool, input.runId) };
    },

    /** The sweeper: reservations past their expiry are closed, in every month (a dead run's, a terminated one's). */
    async sweepExpiredReservations(): Promise<{ expired: number }> {
      return { expired: await sweepAllExpired(deps.pool) };
    },

    /**
     * The sweeper's forecast pass: every user's month-end forecast, the day's first recorded (budget_forecasts), and
     * the month's `forecast-over-limit` event for a user whose median forecast is over the limit. Returns the events
     * recorded now, for the sweep to deliver.
     */
    async forecastBudgets(): Promise<{ users: number; eventIds: string[] }> {
      if (!deps.taskSchedules) return { users: 0, eventIds: [] };
      const forecast = await monthForecast(deps.pool, await deps.taskSchedules());
      const at = new Date(forecast.at);
      const eventIds: string[] = [];
      for (const user of forecast.users) eventIds.push(...(await recordForecast(deps.pool, user, at)));
      return { users: forecast.users.length, eventIds };
    },

    /** The sweeper: threshold events no run delivered that are due for another attempt (none without a webhook). */
    async budgetEventsToRedeliver(): Promise<{ eventIds: string[] }> {
      if (!webhook()) return { eventIds: [] };
      return { eventIds: await undeliveredEvents(deps.pool, { retryAfterSeconds: eventRetrySeconds(), limit: EVENTS_PER_SWEEP }) };
    },

    /**
     * Posts one threshold event to the budget webhook, at least once: the event ID and the webhook-id derived from it
     * are stable, so the receiver drops repeats. Already delivered: nothing to do. Failures are retried by the
     * workflow's retry policy; errors name only the webhook's scheme and host (its path is its secret) and the status.
     */
    async deliverBudgetEvent(input: { eventId: string }): Promise<{ delivered: boolean }> {
      let hook: ReturnType<typeof webhook>;
      try {
        hook = webhook();
      } catch (err) {
        if (err instanceof UserError) throw ApplicationFailure.nonRetryable(err.message, 'UserError');
        throw err;
      }
      const event = await budgetEvent(deps.pool, input.eventId);
      if (!event || event.delivered_at || !hook) return { delivered: false };
      const url = hook.url;
      const forecast = event.kind === 'forecast-over-limit';
      const body = {
        type: forecast ? 'budget.forecast-over-limit' : 'budget.threshold',
        eventId: event.event_id,
        userId: event.user_id,
        threshold: event.threshold,
        month: event.month,
        timeZone: event.time_zone,
        limitUsd: event.limit_usd,
        spentUsd: event.spent_usd,
        reservedUsd: event.reserved_usd,
        ...(forecast ? { forecastUsd: event.forecast_usd } : {}),
        text: forecast
          ? `cronledger: ${event.user_id}'s month-end forecast (${event.forecast_usd} USD at the median cost per run) is over the monthly budget of ${event.limit_usd} USD for ${event.month} (${event.time_zone})`
          : `cronledger: ${event.user_id} reached ${event.threshold}% of the monthly budget for ${event.month} (${event.time_zone})`,
      };
      try {
        await postJson(hook, webhookId(event.event_id), body);
      } catch (err) {
        const message = (err as Error).message;
        await recordEventDelivery(deps.pool, event.event_id, { ok: false, error: message });
        if (err instanceof WebhookRejectedError) throw ApplicationFailure.nonRetryable(message, 'WebhookRejected');
        // No cause attached: the failure chain lands in workflow history, and only the message is known to be URL-safe.
        // eslint-disable-next-line preserve-caught-error
        throw new Error(`budget event ${event.event_id} not delivered to ${webhookTarget(url)}: ${message}`);
      }
      await recordEventDelivery(deps.pool, event.event_id, { ok: true });
      return { delivered: true };
    },

    /**
     * A blocked run of a task with onBudgetExhausted "pause": records the pause (once per task until it is resumed), then
     * pauses the task's schedule with a note naming the reason and the month. A schedule someone else paused stays
     * theirs (nothing recorded, so the sweeper never resumes it); no schedule (a run started by hand): nothing to pause.
     */
    async pauseTaskForBudget(input: BudgetPauseInput): Promise<{ paused: boolean }> {
      const { client, info } = Context.current();
      const described = await describeTaskSchedule(client, input.taskId);
      if (!described || (described.state.paused && !isBudgetPause(described.state.note))) return { paused: false };
      const reason = budgetPauseReason(input);
      const runId = info.workflowExecution?.runId ?? info.activityId;
      const { recorded } = await recordBudgetPause(deps.pool, { ...input, reason, runId, at: now() });
      if (!described.state.paused)
        await client.schedule.getHandle(taskScheduleId(input.taskId)).pause(notePausedFor(described.state.note, reason));
      log.warn('task paused: budget exhausted', { taskId: input.taskId, month: input.month, recorded });
      return { paused: true };
    },

    /**
     * The sweeper: resumes each task paused for budget whose month has turned over in the budget's zone, or whose user's
     * limit was raised, then records the resume with the slots the pause skipped. The schedule is resumed first, so a
     * crash in between resumes it again (harmless) rather than leave it paused with its pause closed. A schedule paused
     * again by someone else since is left paused; its budget pause is closed all the same.
     */
    async resumeBudgetPausedTasks(): Promise<{ resumed: number }> {
      const { client } = Context.current();
      const at = now();
      const due = await budgetPausesDue(deps.pool, at);
      for (const pause of due) {
        const described = await describeTaskSchedule(client, pause.taskId);
        if (described?.state.paused && isBudgetPause(described.state.note)) {
          await client.schedule.getHandle(taskScheduleId(pause.taskId)).unpause(noteResumed(described.state.note));
        }
        const skipped = described ? await unclaimedSlots(client, deps.pool, pause.taskId, pause.pausedAt, at) : 0;
        await recordBudgetResume(deps.pool, pause.pauseId, at, pause.cause, skipped);
        log.info('task resumed after a budget pause', { taskId: pause.taskId, cause: pause.cause, skippedSlots: skipped });
      }
      return { resumed: due.length };
    },
  };
};
