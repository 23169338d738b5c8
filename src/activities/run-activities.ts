import { ApplicationFailure, CancelledFailure, Context, log } from '@temporalio/activity';
import { encode } from 'gpt-tokenizer/model/gpt-4o-mini';
import type pg from 'pg';
import { stageEmbedding } from '../db/memories';
import { completeRun, storeRunMemoryAndComplete, type RunCompletion, type RunStatus, type RunTier } from '../db/runs';
import { UserError } from '../errors';
import { chatPromptTokens } from '../budgets/worst-case';
import { bookUsageOrKeepException } from '../ledger/book-usage';
import { priceChecksOf } from '../ledger/price-check';
import { bookCallAndCompleteRun, LedgerConflictError, usageKey, type UsageBooking } from '../ledger/record-usage';
import { embeddingInputLimit, fitEmbeddingInput } from '../models/embedding-input';
import {
  BilledCallError,
  MissingUsageError,
  ProviderRejectedError,
  ProviderUnavailableError,
  type CallKind,
  type ModelProvider,
  type ServiceTier,
  type TokenUsage,
  type UsageInHistory,
  usageForHistory,
  fullUsage,
} from '../models/provider';
import { PLAIN_TEXT_TOKENS } from '../models/plain-text-tokens';
import type { SimulateProfile } from '../models/simulate-profile';
import { AwaitingCapacityError, capacityOf, type Capacity } from '../ratelimits/capacity';

export interface RunActivityDeps {
  pool: pg.Pool;
  provider: ModelProvider;
  /** Which worker process ran the activity, recorded on claims and ledger rows. */
  workerId: string;
}

export interface ClaimRunInput {
  idempotencyKey: string;
  taskId: string;
  userId: string;
  scheduledMinute: string;
  manual?: boolean;
  /** A retry: take the claim over from this execution (Temporal run ID) if it owns it and did not complete. */
  supersedesRunId?: string;
}

/**
 * One call of one step of the execution that schedules it (its IDs come from the activity's context, not from
 * history). Nothing here is booked: the workflow books the outcome with bookUsage.
 */
export interface ModelCallInput {
  step: 'chat' | 'embed';
  /** Which call of this step (1, then +1 after each billed failure): the last part of the ledger key. */
  attempt: number;
  model: string;
  text: string;
  simulate?: SimulateProfile;
  /**
   * Under the budget guard: the chat reply's cap (max_completion_tokens), and the embedding input's cap in tokens, so
   * neither call can be billed beyond the worst case reserved for it.
   */
  maxOutputTokens?: number;
  /** The service tier a chat call asks for: refused before the call when the price gives it no rates. */
  serviceTier?: ServiceTier;
}

/**
 * What the provider answered, whenever its answer carried usage: a usable reply, or a billed failure. A failure is
 * returned, not thrown, because Temporal keeps only the last attempt's failure: usage carried by a failure that is
 * retried would never become durable, and so never booked.
 */
export interface ModelCallOutcome {
  outcome: 'answered' | 'billed-failure';
  usage: UsageInHistory;
  providerModel: string;
  requestId: string | null;
  /** The chat reply. */
  text?: string;
  /**
   * An embedding's vector only when storing it failed (its floats are not money). Otherwise it is stored under the
   * call's ledger key (call_embeddings) for the run's completion to read, so that it stays out of history.
   */
  vector?: number[];
  /** Why a billed call failed. */
  error?: string;
  /** The embedding input's token count before it was cut to the model's limit, when it was. */
  inputTruncatedFrom?: number;
  /** When the provider's answer (with its usage) came back to the worker, ISO 8601: the start of the booking lag. */
  receivedAt?: string;
}

export interface BookUsageInput extends Pick<ModelCallInput, 'step' | 'attempt' | 'model'> {
  taskId: string;
  userId: string;
  /** The slot's workflow ID. */
  workflowId: string;
  /** Temporal's run ID of the execution: the first part of the ledger key. */
  runId: string;
  kind: CallKind;
  status: 'ok' | 'failed';
  usage: UsageInHistory;
  providerModel: string;
  requestId: string | null;
  inputTruncatedFrom?: number;
  /** From the call's outcome: kept on the ledger row (usage_received_at) to measure the booking lag. */
  receivedAt?: string;
}

/** What the workflow reads of a booking (it is kept in the run's history). */
export type BookUsageResult =
  | { booked: 'ledger'; costUsd: string }
  /** The usage could not be priced or was invalid: kept in usage_exceptions instead, never nowhere. */
  | { booked: 'exception'; exceptionId: string; reason: string };

export interface StoreMemoryInput {
  workflowId: string;
  runId: string;
  taskId: string;
  userId: string;
  content: string;
  /** From the embed step's outcome: the vector when it was not stored under its call's key. */
  embedding?: number[];
  inputTruncatedFrom?: number;
}

/** A completed run's last step, besides its last booking: its memory and its claim. */
export interface CompletedRunInput {
  memory: StoreMemoryInput;
  idempotencyKey: string;
  tier?: RunTier;
  /** Why the run was downgraded other than by its budget's band (the task's maxCostPerRun, a wait's end): runs.budget. */
  budget?: Record<string, unknown>;
}

export const createRunActivities = (deps: RunActivityDeps) => ({
  /** Closes this execution's own claim (never another generation's). */
  async completeRun(input: {
    idempotencyKey: string;
    status: Exclude<RunStatus, 'running'>;
    error?: string;
    tier?: RunTier;
    budget?: Record<string, unknown>;
  }): Promise<void> {
    await completeRun(deps.pool, { ...input, temporalRunId: execution('completeRun').runId });
  },

  /** One chat request. Refused before any spend when the model has no price in force (by the database's clock, callProvider). */
  async callChat(input: ModelCallInput): Promise<ModelCallOutcome> {
    // As providers count a request against tokens per minute: its prompt and its output cap.
    const tokens = () => chatPromptTokens(input.text) + (input.maxOutputTokens ?? 0);
    const call = { model: input.model, kind: 'chat' as const, tokens, serviceTier: input.serviceTier ?? null };
    return callProvider(deps.pool, capacityOf(deps.pool), call, async (signal) => {
      const cap = input.maxOutputTokens === undefined ? {} : { maxOutputTokens: input.maxOutputTokens };
      const tier = input.serviceTier === undefined ? {} : { serviceTier: input.serviceTier };
      const r = await deps.provider.chat({ ...context(input), signal, model: input.model, prompt: input.text, ...cap, ...tier });
      return { outcome: 'answered', usage: r.usage, providerModel: r.providerModel, requestId: r.requestId, text: r.text };
    });
  },

  /**
   * One embedding request for the run's reply, cut by tokens to the model's input limit (and saying so) when longer.
   * The vector is stored under the call's ledger key (stageVector), and the outcome does not carry it.
   */
  async callEmbedding(input: ModelCallInput): Promise<ModelCallOutcome> {
    const limit = Math.min(embeddingInputLimit(input.model), input.maxOutputTokens ?? Number.MAX_SAFE_INTEGER);
    const fitted = fitEmbeddingInput(input.model, input.text, limit);
    if (fitted.truncatedFromTokens !== undefined) {
      log.warn('reply longer than the embedding model accepts; embedding its first tokens only', {
        model: input.model,
        tokens: fitted.truncatedFromTokens,
      });
    }
    const truncated = fitted.truncatedFromTokens === undefined ? {} : { inputTruncatedFrom: fitted.truncatedFromTokens };
    const callKey = usageKey({ runId: execution('callEmbedding').runId, step: input.step, attempt: input.attempt });
    const tokens = () => encode(fitted.text, PLAIN_TEXT_TOKENS).length;
    const outcome = await callProvider(
      deps.pool,
      capacityOf(deps.pool),
      { model: input.model, kind: 'embedding', tokens },
      async (signal) => {
        const r = await deps.provider.embed({ ...context(input), signal, model: input.model, input: fitted.text });
        const where = await stageVector(deps.pool, callKey, r.vector);
        return { outcome: 'answered', usage: r.usage, providerModel: r.providerModel, requestId: r.requestId, ...where };
      },
    );
    return { ...outcome, ...truncated };
  },

  /**
   * Books one call's usage. Idempotent on its key, so the workflow retries it without limit: a database outage
   * delays the booking, never repeats the call. Usage the ledger refuses (invalid, or unpriced by now) is kept in
   * usage_exceptions. A key already booked for a different call fails loudly and for good.
   */
  async bookUsage(input: BookUsageInput): Promise<BookUsageResult> {
    return bookUsage(deps, input);
  },

  /**
   * The last step of a completed run: books its last call's usage as bookUsage does, then stores the run's memory and
   * closes its claim, all in one statement (bookCallAndCompleteRun). Each part is idempotent (the booking on its key,
   * the memory once per execution, the claim closed only while this execution owns it), so a re-run repeats none of
   * them. When that statement fails for any reason, the booking and the completion are made one after the other, as
   * two statements: usage the ledger refuses is then kept in usage_exceptions and the run left open, for the workflow to
   * fail it, and a completion that keeps failing never holds the booking back.
   */
  async bookUsageAndCompleteRun(input: CompletedRunInput & { booking: BookUsageInput }): Promise<BookUsageResult> {
    const temporalRunId = execution('bookUsageAndCompleteRun').runId;
    const completion: RunCompletion = {
      idempotencyKey: input.idempotencyKey,
      temporalRunId,
      status: 'completed',
      ...(input.tier ? { tier: input.tier } : {}),
      ...(input.budget ? { budget: input.budget } : {}),
    };
    // the embedding was stored under the key of the call this booking books, unless its vector came through history
    const embeddingKey = input.memory.embedding ? undefined : usageKey(input.booking);
    const memory = { ...input.memory, embeddingKey, temporalRunId: input.memory.runId };
    const booking = bookingOf(input.booking, deps.workerId);
    try {
      const entry = await bookCallAndCompleteRun(deps.pool, booking, completion, memory);
      return { booked: 'ledger', costUsd: entry.cost_usd };
    } catch (err) {
      // usage the ledger refuses is the expected case here (bookUsage logs it); anything else is worth a line
      if (!(err instanceof UserError))
        log.warn('booking with completion failed; booking, then completing', { error: (err as Error).message });
      const booked = await bookUsage(deps, input.booking);
      if (booked.booked === 'ledger') await storeRunMemoryAndComplete(deps.pool, completion, memory);
      return booked;
    }
  },
});

async function bookUsage(deps: RunActivityDeps, input: BookUsageInput): Promise<BookUsageResult> {
  const booking = bookingOf(input, deps.workerId);
  const outcome = await bookUsageOrKeepException(deps.pool, booking).catch((err: unknown) => {
    throw finalOrRetried(err);
  });
  if (outcome.booked === 'ledger') return { booked: 'ledger', costUsd: outcome.entry.cost_usd };
  log.error('billed usage could not be booked in the ledger; kept in usage_exceptions', {
    key: usageKey(booking),
    reason: outcome.exception.reason,
  });
  return { booked: 'exception', exceptionId: outcome.exception.id, reason: outcome.exception.reason };
}

const HEARTBEAT_EVERY_MS = 5_000;
/**
 * How long one attempt of a model call may wait for the provider's rate limit before its request: 20 s, so the wait
 * and the request (the OpenAI client's own timeout is 90 s) fit the attempt's 2-minute start-to-close timeout. A
 * longer wait ends the attempt and becomes the retry's delay (the call's 30-minute budget bounds it).
 */
const CAPACITY_WAIT_IN_ATTEMPT_MS = 20_000;
/** How long an embedding's vector may take to store before it goes through history instead. */
const STAGE_VECTOR_TIMEOUT_MS = 10_000;

/**
 * Stores an answered embedding's vector under its call's key (the outcome then carries nothing). The provider has billed the call by
 * now, so a database that fails or does not answer within STAGE_VECTOR_TIMEOUT_MS must not fail the activity (a retry
 * would call, and pay, again): the vector is then returned to go through history, as the outcome's `vector`.
 */
async function stageVector(pool: pg.Pool, callKey: string, vector: number[]): Promise<{ vector?: number[] }> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), STAGE_VECTOR_TIMEOUT_MS)));
  try {
    if ((await Promise.race([stageEmbedding(pool, callKey, vector), late])) !== 'late') return {};
    log.warn('embedding not stored in time; its vector goes through history', { callKey });
  } catch (err) {
    log.warn('embedding not stored; its vector goes through history', { callKey, error: (err as Error).message });
  } finally {
    clearTimeout(timer);
  }
  return { vector };
}

/**
 * Checks the price, waits for the provider's rate limit (shared by every worker, src/ratelimits/capacity.ts), then
 * runs one provider request as this activity attempt: heartbeats throughout (so a dead worker's call is retried
 * within the heartbeat timeout, and a cancel reaches the request), aborts the request on cancellation, and sorts the
 * outcome. Usage that came back is returned, even with a failure; a refusal without usage is thrown, with the
 * provider's Retry-After as the next retry's delay (and, for a rate-limited model, every worker's).
 */
async function callProvider(
  pool: pg.Pool,
  capacity: Capacity,
  /** serviceTier: the tier a chat call asks for, refused before the call when its price gives no rates. */
  call: { model: string; kind: CallKind; tokens: () => number; serviceTier?: ServiceTier | null },
  request: (signal: AbortSignal) => Promise<ModelCallOutcome & { usage: TokenUsage }>,
): Promise<ModelCallOutcome> {
  const { model, kind } = call;
  const ctx = Context.current();
  // No heartbeat at the start: the server counts the heartbeat timeout from the attempt's start, and each heartbeat
  // is an RPC that the server persists (a mutable-state write). A call that answers within HEARTBEAT_EVERY_MS (the
  // mock model, a fast provider) then sends none, as a bare activity. A cancel reaches a call at its first beat.
  const beat = setInterval(() => ctx.heartbeat(), HEARTBEAT_EVERY_MS);
  try {
    // Inside the heartbeats: a price check slowed by a struggling database must not outlive the heartbeat timeout,
    // or Temporal starts another attempt while this one goes on to call (and pay) the provider. A price found in force
    // is trusted for up to 10 s (priceChecksOf says why that is safe); a refusal is asked again at every call.
    await nonRetryableWhenFinal(() => priceChecksOf(pool).refuseUnpricedCall(model, kind, call.serviceTier ?? null));
    // The server gave up on this attempt (timed out, or the run was cancelled): spend nothing.
    if (ctx.cancellationSignal.aborted) throw new CancelledFailure('model call cancelled before the request was sent');
    const waitedMs = await capacity.acquire(model, call.tokens, {
      signal: ctx.cancellationSignal,
      onWait: () => ctx.heartbeat(),
      maxWaitMs: CAPACITY_WAIT_IN_ATTEMPT_MS,
    });
    if (waitedMs > 0) log.info('waited for the provider rate limit', { model, waitedMs });
    const outcome = await request(ctx.cancellationSignal);
    return { ...outcome, usage: usageForHistory(outcome.usage), receivedAt: new Date().toISOString() };
  } catch (err) {
    if (ctx.cancellationSignal.aborted)
      throw new CancelledFailure('model call cancelled', undefined, err instanceof Error ? err : undefined);
    if (err instanceof BilledCallError) {
      log.warn('model call failed after the provider reported usage; returning it to be booked as failed', { error: err.message });
      return {
        outcome: 'billed-failure',
        usage: usageForHistory(err.usage),
        providerModel: err.providerModel,
        requestId: err.requestId,
        error: err.message,
        receivedAt: new Date().toISOString(),
      };
    }
    if (err instanceof AwaitingCapacityError) {
      // Nothing was sent. The next attempt starts after the wait, with a whole start-to-close timeout for its request.
      throw ApplicationFailure.create({ message: err.message, type: err.name, nextRetryDelay: err.waitMs });
    }
    if (err instanceof ProviderUnavailableError) {
      if ((err.retryAfterMs || err.status === 429) && (await capacity.isLimited(model).catch(() => false))) {
        await capacity.hold(model, err.retryAfterMs ?? 0, err.status === 429).catch((holdErr: unknown) => {
          log.warn("could not share the provider's Retry-After with the other workers", { model, error: (holdErr as Error).message });
        });
      }
      throw ApplicationFailure.create({
        message: err.message,
        type: err.name,
        // Retry-After wins over the retry policy's backoff for this one retry. Zero is left to the backoff: the server
        // reads a zero delay as "no retry" (RETRY_STATE_TIMEOUT). A delay beyond the call's budget ends the call.
        nextRetryDelay: err.retryAfterMs ? err.retryAfterMs : undefined,
      });
    }
    throw finalOrRetried(err);
  } finally {
    clearInterval(beat);
  }
}

/**
 * The non-retryable rule, written once: failures that retrying can't fix become non-retryable Application failures
 * (the workflow's retry policies list no error types). Missing prices and invalid input are UserErrors.
 */
function finalOrRetried(err: unknown): unknown {
  const final =
    err instanceof UserError ||
    err instanceof MissingUsageError ||
    err instanceof ProviderRejectedError ||
    err instanceof LedgerConflictError;
  return final ? ApplicationFailure.nonRetryable((err as Error).message, (err as Error).name) : err;
}

async function nonRetryableWhenFinal<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw finalOrRetried(err);
  }
}

function execution(activity: string): { workflowId: string; runId: string } {
  const { workflowExecution } = Context.current().info;
  if (!workflowExecution) throw ApplicationFailure.nonRetryable(`${activity} only runs inside a scheduledRun workflow`);
  return workflowExecution;
}

const bookingOf = (input: BookUsageInput, workerId: string): UsageBooking => ({
  runId: input.runId,
  workflowId: input.workflowId,
  step: input.step,
  attempt: input.attempt,
  userId: input.userId,
  taskId: input.taskId,
  model: input.model,
  kind: input.kind,
  status: input.status,
  usage: fullUsage(input.usage),
  providerModel: input.providerModel,
  providerRequestId: input.requestId,
  workerId,
  inputTruncatedFrom: input.inputTruncatedFrom ?? null,
  usageReceivedAt: input.receivedAt === undefined ? null : new Date(input.receivedAt),
});

const context = (input: Pick<ModelCallInput, 'attempt' | 'simulate'>) => ({
  attempt: input.attempt,
  simulate: input.simulate,
});
