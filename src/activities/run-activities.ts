import { ApplicationFailure, Context, log, sleep } from '@temporalio/activity';
import type pg from 'pg';
import { NON_RETRYABLE_MODEL_ERRORS } from '../constants';
import { claimRun, completeRun } from '../db/runs';
import { UserError } from '../errors';
import { costOfUsage, type CallKind } from '../ledger/cost';
import { priceInForce } from '../ledger/prices';
import type { LedgerEntry } from '../ledger/entries';
import { recordUsage, usageKey, type UsageBooking } from '../ledger/record-usage';
import { BilledCallError, type ModelProvider, type TokenUsage } from '../models/provider';
import type { SimulateProfile } from '../models/simulate-profile';

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
}

export interface ModelStepInput {
  /** The run's workflow ID: the first part of every ledger key of this run. */
  runId: string;
  step: 'chat' | 'embed';
  taskId: string;
  userId: string;
  model: string;
  text: string;
  simulate?: SimulateProfile;
}

export interface ModelStepResult {
  text: string;
  ledgerEntryId: string;
  costUsd: string;
  usage: TokenUsage;
}

export const createRunActivities = (deps: RunActivityDeps) => ({
  async claimRun(input: ClaimRunInput): Promise<{ claimed: boolean; ownerWorkflowRunId: string }> {
    const { workflowExecution } = Context.current().info;
    if (!workflowExecution) throw ApplicationFailure.nonRetryable('claimRun only runs inside a scheduledRun workflow');
    return claimRun(deps.pool, { ...input, ...fromExecution(workflowExecution), workerId: deps.workerId });
  },

  async completeRun(input: { idempotencyKey: string; status: 'completed' | 'failed'; error?: string }): Promise<void> {
    await completeRun(deps.pool, input);
  },

  /** One chat call, booked the moment its usage comes back. */
  async chat(input: ModelStepInput): Promise<ModelStepResult> {
    return callAndBook(deps, input, 'chat', async (attempt) => {
      const r = await deps.provider.chat({ ...context(input, attempt), model: input.model, prompt: input.text });
      return { ...r, output: r.text };
    });
  },

  /** Embeds the run's reply and stores it as the run's memory; the embedding call is booked like any other. */
  async embedMemory(input: ModelStepInput): Promise<ModelStepResult> {
    let vector: number[] = [];
    const result = await callAndBook(deps, input, 'embedding', async (attempt) => {
      const r = await deps.provider.embed({ ...context(input, attempt), model: input.model, input: input.text });
      vector = r.vector;
      return { ...r, output: input.text };
    });
    await deps.pool.query(
      `insert into memories (run_workflow_id, task_id, user_id, content, embedding) values ($1, $2, $3, $4, $5)
       on conflict (run_workflow_id) do nothing`,
      [input.runId, input.taskId, input.userId, input.text, JSON.stringify(vector)],
    );
    return result;
  },
});

type ProviderAnswer = { output: string; usage: TokenUsage; providerModel: string; requestId: string | null };

async function callAndBook(
  deps: RunActivityDeps,
  input: ModelStepInput,
  kind: CallKind,
  call: (attempt: number) => Promise<ProviderAnswer>,
): Promise<ModelStepResult> {
  const { attempt } = Context.current().info;
  const booking = { runId: input.runId, step: input.step, attempt, userId: input.userId, taskId: input.taskId, model: input.model, kind, workerId: deps.workerId };
  try {
    // No call without a price: refuse before any spend. Pricing zero tokens also refuses a model whose version lacks
    // the rates this kind of call needs (an embedding-only model used for chat), which recordUsage would hit only after the call.
    const now = new Date();
    costOfUsage(kind, { promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 }, await priceInForce(deps.pool, input.model, now), now);
    let answer: ProviderAnswer;
    try {
      answer = await call(attempt);
    } catch (err) {
      if (err instanceof BilledCallError) {
        // The provider billed this attempt even though it failed: book it before letting the retry happen.
        await bookPersistently(deps.pool, { ...booking, status: 'failed', usage: err.usage, providerModel: err.providerModel, providerRequestId: err.requestId });
        log.warn('model call failed after usage was reported; booked as failed', { runId: input.runId, step: input.step, attempt });
      }
      throw err;
    }
    const entry = await bookPersistently(deps.pool, {
      ...booking,
      status: 'ok',
      usage: answer.usage,
      providerModel: answer.providerModel,
      providerRequestId: answer.requestId,
    });
    return { text: answer.output, ledgerEntryId: entry.id, costUsd: entry.cost_usd, usage: answer.usage };
  } catch (err) {
    if (err instanceof Error && NON_RETRYABLE_MODEL_ERRORS.includes(err.name)) {
      throw ApplicationFailure.nonRetryable(err.message, err.name);
    }
    throw err;
  }
}

/**
 * Books usage that the provider already billed. A transient database error here must not fail the activity, or its
 * retry would call (and pay) the provider again while this call stayed unbooked: so the booking itself is retried,
 * which is harmless because the insert is idempotent on its key. Invalid usage or a missing price fail at once.
 */
async function bookPersistently(pool: pg.Pool, booking: UsageBooking): Promise<LedgerEntry> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await recordUsage(pool, booking);
    } catch (err) {
      if (err instanceof UserError || attempt >= BOOKING_ATTEMPTS) throw err;
      log.warn('booking usage failed; retrying the idempotent insert', { key: usageKey(booking), attempt, error: String(err) });
      await sleep(Math.min(200 * 2 ** attempt, 5_000));
    }
  }
}

const BOOKING_ATTEMPTS = 8;

const context = (input: ModelStepInput, attempt: number) => ({
  taskId: input.taskId,
  userId: input.userId,
  attempt,
  simulate: input.simulate,
});

const fromExecution = (e: { workflowId: string; runId: string }) => ({ workflowId: e.workflowId, temporalRunId: e.runId });
