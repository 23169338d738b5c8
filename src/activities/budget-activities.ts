import { ApplicationFailure, Context, log } from '@temporalio/activity';
import type pg from 'pg';
import { secretSetting } from '../config';
import {
  AwaitingReservationsError,
  claimAndReserve,
  reserveBudget,
  releaseReservations,
  sweepAllExpired,
  type BudgetFigures,
  type PlannedCall,
  type ReserveDecision,
} from '../budgets/reserve';
import { claimRun, type ClaimOutcome } from '../db/runs';
import { appliedVersion, recordRejectedRun } from '../db/task-versions';
import { NoPriceError } from '../ledger/prices';
import { budgetEvent, recordEventDelivery, undeliveredEvents } from '../budgets/threshold-events';
import { cheapModelsEverNamed } from '../budgets/downgrades';
import { worstCaseOf } from '../budgets/worst-case';
import { DEFAULT_MAX_OUTPUT_TOKENS } from '../constants';
import { ProviderRejectedError, type PromptCountRequest, type ServiceTier } from '../models/provider';
import type { SimulateProfile } from '../models/simulate-profile';
import { UserError } from '../errors';
import { budgetWebhookFromEnv, postJson, readWebhook, webhookId, WebhookRejectedError, webhookTarget } from '../reports/delivery';
import type { ClaimRunInput } from './run-activities';

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
 * tier, the models only when they are not the ones asked for (a downgrade), the threshold events only when there are
 * any, and the figures only for a blocked run (its reason).
 */
export type RunDecision =
  | { tier: 'default' | 'cheap'; models?: Record<string, string>; eventIds?: string[] }
  | (BudgetFigures & { tier: 'blocked'; worstCaseUsd: string; eventIds?: string[] });

function forTheRun(decision: ReserveDecision, calls: PlannedCall[]): RunDecision {
  const events = decision.eventIds.length > 0 ? { eventIds: decision.eventIds } : {};
  if (decision.tier === 'blocked') {
    const { limitUsd, spentUsd, reservedUsd, worstCaseUsd, month, timeZone } = decision;
    return { tier: 'blocked', limitUsd, spentUsd, reservedUsd, worstCaseUsd, month, timeZone, ...events };
  }
  const downgraded = calls.some((c) => decision.models[c.step] !== c.model);
  return { tier: decision.tier, ...(downgraded ? { models: decision.models } : {}), ...events };
}

const logDecision = (decision: ReserveDecision): void =>
  log.info('budget decision', {
    tier: decision.tier,
    worstCaseUsd: decision.worstCaseUsd,
    spentUsd: decision.spentUsd,
    reservedUsd: decision.reservedUsd,
  });

/** How often a run's first decision asks again while other runs' open reservations alone keep it from its tier. */
export const AWAITING_RESERVATIONS_POLL = '1 second';

/**
 * What a failed decision throws to Temporal:
 * - NoPriceError: a model without a price in force cannot be reserved for, and retrying will not price it; the decision
 *   fails for good, with NoPriceError's message (the model, the instant, and `cronledger prices apply FILE` as the fix).
 * - AwaitingReservationsError: this attempt fails, and the retry policy (no limit) asks again after
 *   AWAITING_RESERVATIONS_POLL. Other runs' reservations settle when they book or end, or stop counting at their
 *   expiry, so the wait ends.
 * - anything else as it is (retried).
 */
function decisionFailure(err: unknown): never {
  if (err instanceof NoPriceError) throw ApplicationFailure.nonRetryable(err.message, 'NoPriceError');
  if (err instanceof AwaitingReservationsError) {
    throw ApplicationFailure.create({ message: err.message, type: 'AwaitingReservations', nextRetryDelay: AWAITING_RESERVATIONS_POLL });
  }
  throw err;
}

export const createBudgetActivities = (deps: BudgetActivityDeps) => {
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
     */
    async reserveBudget(input: ReserveRunInput): Promise<RunDecision> {
      const all = await plannedCalls(deps, input);
      const calls = input.again
        ? all.filter((c) => c.step === input.again?.step).map((c) => ({ ...c, attempt: input.again?.attempt ?? 1 }))
        : all;
      const decision = await reserveBudget(deps.pool, {
        userId: input.userId,
        runId: input.runId,
        workflowId: input.workflowId,
        calls,
        mayDowngrade: !input.again,
        expirySeconds: expirySeconds(),
      }).catch(decisionFailure);
      logDecision(decision);
      return forTheRun(decision, calls);
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
      };
      const budget: ReserveRunInput = { workflowId, runId, ...definition, prompt: definition.input };
      const claim = { ...rest, taskId, userId: definition.userId, workflowId, temporalRunId: runId, workerId: deps.workerId };
      const calls = await plannedCalls(deps, budget);
      const result = await claimAndReserve(deps.pool, claim, { calls, expirySeconds: expirySeconds() }).catch(async (err: unknown) => {
        if (!(err instanceof NoPriceError)) return decisionFailure(err);
        // The statement rolled back, claim included. The claim alone, so the failure is recorded on the run (the
        // workflow closes it as failed with this message); a slot another execution owns is its business.
        const outcome = await claimRun(deps.pool, claim);
        if (!outcome.claimed) return { claim: outcome, decision: null };
        return decisionFailure(err);
      });
      if (!result.decision) return { claim: result.claim, decision: null, definition };
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
      const body = {
        type: 'budget.threshold',
        eventId: event.event_id,
        userId: event.user_id,
        threshold: event.threshold,
        month: event.month,
        timeZone: event.time_zone,
        limitUsd: event.limit_usd,
        spentUsd: event.spent_usd,
        reservedUsd: event.reserved_usd,
        text: `cronledger: ${event.user_id} reached ${event.threshold}% of the monthly budget for ${event.month} (${event.time_zone})`,
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
  };
};
