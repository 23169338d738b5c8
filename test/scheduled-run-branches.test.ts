import { WorkflowFailedError, type Client } from '@temporalio/client';
import { ApplicationFailure, CancelledFailure, Context } from '@temporalio/activity';
import { NativeConnection, Worker } from '@temporalio/worker';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import type { ReserveRunInput, RunDefinition } from '../src/activities/budget-activities';
import type { Activities } from '../src/activities';
import type { BookUsageInput, BookUsageResult, ModelCallInput, ModelCallOutcome } from '../src/activities/run-activities';
import { connectClient } from '../src/client';
import type { ClaimOutcome } from '../src/db/runs';
import { MAX_CALLS_PER_STEP, scheduledRun, type ScheduledRunInput } from '../src/workflows/scheduled-run';
import type { TestRun } from './support/applied';
import './support/provided';
import './support/quiet-runtime';
import { workflowBundle } from './support/workers';
import { fullUsage } from '../src/models/provider';

/**
 * The fast layer: the real scheduledRun workflow code on the real dev server, with stub activities typed as the real
 * ones (`Activities`, so the compiler catches drift) and no PostgreSQL. Each branch of the workflow in seconds:
 * duplicate, failure and cancel bookkeeping, billed-failure re-calls, booking through a database outage, manual and
 * retry claims. The real-server tests (ledger, exactly-once, backfill, openai-provider) cover the same code with the
 * real activities; these come in addition, never instead.
 */

let client: Client;
let connection: NativeConnection;
const namespace = 'scheduled-run-branches';

beforeAll(async () => {
  const stack = inject('stack');
  client = await connectClient({ temporalAddress: stack.temporalAddress, namespace });
  connection = await NativeConnection.connect({ address: stack.temporalAddress });
});

afterAll(async () => {
  await connection?.close();
  await client?.connection.close();
});

type Call = { name: keyof Activities; input: unknown };

const USAGE = fullUsage({ promptTokens: 100, cachedPromptTokens: 0, completionTokens: 20, reasoningTokens: 0 });
const answered = (input: ModelCallInput): ModelCallOutcome => ({
  outcome: 'answered',
  usage: USAGE,
  providerModel: 'stub-model',
  requestId: `req-${input.step}-${input.attempt}`,
  ...(input.step === 'chat' ? { text: 'the reply' } : {}),
});
const billedFailure = (input: ModelCallInput): ModelCallOutcome => ({
  outcome: 'billed-failure',
  usage: USAGE,
  providerModel: 'stub-model',
  requestId: `req-${input.step}-${input.attempt}`,
  error: 'reply cut off',
});

/** How the claim goes, for the stub claimAndReserve (its reservation is `over.reserveBudget`'s answer, or the happy one). */
type Over = Partial<Activities> & { claim?: () => Promise<ClaimOutcome> };

/**
 * Stub activities: every one records its call; `over` replaces the happy-path behaviour of some of them. The report
 * activities are never reached by scheduledRun and fail if they are.
 */
function stubActivities(calls: Call[], over: Over = {}): Activities {
  const record = <K extends keyof Activities>(name: K, happy: Activities[K]): Activities[K] =>
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    (async (input: any) => {
      calls.push({ name, input });
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      return ((over[name] ?? happy) as any)(input);
    }) as Activities[K];
  const happyClaim = async (): Promise<ClaimOutcome> => ({
    claimed: true,
    ownerWorkflowRunId: Context.current().info.workflowExecution?.runId ?? '',
    generation: 1,
  });
  const happyReserve = async (input: ReserveRunInput) => ({
    tier: 'default' as const,
    models: { chat: input.model, embed: input.embeddingModel },
    worstCaseUsd: '0',
    eventIds: [],
    limitUsd: null,
    spentUsd: '0',
    reservedUsd: '0',
    timeZone: 'UTC',
    month: '2026-11',
  });
  const happyBook = async (): Promise<BookUsageResult> => ({ booked: 'ledger', costUsd: '0.000027000000000000' });
  const unused = (name: string) => async (): Promise<never> => {
    throw ApplicationFailure.nonRetryable(`${name} is not part of scheduledRun`);
  };
  return {
    // the claim and the first reservation in one step: the claim and reserveBudget overrides apply
    claimAndReserve: record('claimAndReserve', async ({ fingerprint }) => {
      const definition = definitions.get(fingerprint);
      if (!definition) return { rejected: `no version ${fingerprint}` };
      const claim = await (over.claim ?? happyClaim)();
      const { workflowId, runId } = Context.current().info.workflowExecution ?? { workflowId: '', runId: '' };
      const budget: ReserveRunInput = { workflowId, runId, ...definition, prompt: definition.input };
      return { claim, decision: claim.claimed ? await (over.reserveBudget ?? happyReserve)(budget) : null, definition };
    }),
    completeRun: record('completeRun', async () => undefined),
    callChat: record('callChat', async (input: ModelCallInput) => answered(input)),
    callEmbedding: record('callEmbedding', async (input: ModelCallInput) => answered(input)),
    bookUsage: record('bookUsage', happyBook),
    // the last booking with the run's completion: the bookUsage override applies to its booking
    bookUsageAndCompleteRun: record('bookUsageAndCompleteRun', async ({ booking }) => (over.bookUsage ?? happyBook)(booking)),
    reserveBudget: record('reserveBudget', happyReserve),
    releaseBudget: record('releaseBudget', async () => ({ released: 0 })),
    pauseTaskForBudget: record('pauseTaskForBudget', async () => ({ paused: false })),
    resumeBudgetPausedTasks: unused('resumeBudgetPausedTasks'),
    deliverBudgetEvent: unused('deliverBudgetEvent'),
    sweepExpiredReservations: unused('sweepExpiredReservations'),
    budgetEventsToRedeliver: unused('budgetEventsToRedeliver'),
    forecastBudgets: unused('forecastBudgets'),
    resolveReportMonth: unused('resolveReportMonth'),
    generateMonthlyReport: unused('generateMonthlyReport'),
    deliverMonthlyReport: unused('deliverMonthlyReport'),
    foldRollupQueues: unused('foldRollupQueues'),
  };
}

/** The stub's task_versions: each run's definition under a fingerprint of its own. */
const definitions = new Map<string, RunDefinition>();

const task = (over: Partial<TestRun> = {}): TestRun => ({
  taskId: 'branchy',
  userId: 'u1',
  input: 'Summarise the day.',
  model: 'openai/gpt-4o-mini',
  embeddingModel: 'openai/text-embedding-3-small',
  ...over,
});

/** Runs one scheduledRun with the stubs on a fresh task queue; `during` runs while it is under way (e.g. to cancel it). */
async function run(
  activities: Activities,
  input: TestRun,
  opts: { workflowId?: string; during?: (handle: Awaited<ReturnType<Client['workflow']['start']>>) => Promise<void> } = {},
) {
  const taskQueue = `branches-${randomUUID().slice(0, 8)}`;
  const workflowId = opts.workflowId ?? `cron-branchy-${randomUUID().slice(0, 6)}-2026-11-02T09:00:00Z`;
  // Heartbeats (which carry a cancel to the activity) are sent at most every 0.8 × heartbeatTimeout by default, 24 s.
  const worker = await Worker.create({
    connection,
    namespace,
    taskQueue,
    workflowBundle: await workflowBundle(),
    activities,
    maxHeartbeatThrottleInterval: '200 ms',
  });
  return worker.runUntil(async () => {
    const { taskId, manual, retry, ...definition } = input;
    const fingerprint = randomUUID();
    definitions.set(fingerprint, definition);
    const args: [ScheduledRunInput] = [{ taskId, fingerprint, ...(manual ? { manual } : {}), ...(retry ? { retry } : {}) }];
    const handle = await client.workflow.start(scheduledRun, { args, workflowId, taskQueue });
    await opts.during?.(handle);
    const outcome = await handle.result().then(
      (result) => ({ result, error: undefined as unknown }),
      (error: unknown) => ({ result: undefined, error }),
    );
    return { ...outcome, workflowId, runId: handle.firstExecutionRunId };
  });
}

const names = (calls: Call[]) => calls.map((c) => c.name);
const inputsOf = <T>(calls: Call[], name: keyof Activities) => calls.filter((c) => c.name === name).map((c) => c.input as T);
/** Every booking asked for, in order: bookUsage's, and the one the completing step makes. */
const bookingsOf = (calls: Call[]): BookUsageInput[] =>
  calls.flatMap((c) =>
    c.name === 'bookUsage'
      ? [c.input as BookUsageInput]
      : c.name === 'bookUsageAndCompleteRun'
        ? [(c.input as { booking: BookUsageInput }).booking]
        : [],
  );

it('completes: claim, call and book chat, call the embedding, then book it, store the memory and close the claim in one step', async () => {
  const calls: Call[] = [];
  const { result, error, workflowId, runId } = await run(stubActivities(calls), task());

  expect(error).toBeUndefined();
  expect(result).toMatchObject({ status: 'completed', tier: 'default', idempotencyKey: 'cron:branchy:2026-11-02T09:00Z', generation: 1 });
  expect(result?.manual).toBeUndefined();
  expect(names(calls)).toEqual(['claimAndReserve', 'callChat', 'bookUsage', 'callEmbedding', 'bookUsageAndCompleteRun']);
  // ledger keys name the execution: Temporal's run ID, with the workflow ID alongside
  expect(bookingsOf(calls).map((b) => [b.runId, b.workflowId, b.step, b.attempt, b.status])).toEqual([
    [runId, workflowId, 'chat', 1, 'ok'],
    [runId, workflowId, 'embed', 1, 'ok'],
  ]);
  expect(inputsOf(calls, 'bookUsageAndCompleteRun')).toEqual([
    {
      idempotencyKey: 'cron:branchy:2026-11-02T09:00Z',
      tier: 'default',
      // no vector: the embed step stored it under its call's key, the key of this booking
      memory: { workflowId, runId, taskId: 'branchy', userId: 'u1', content: 'the reply' },
      booking: expect.objectContaining({ step: 'embed', attempt: 1, status: 'ok' }),
    },
  ]);
  expect(result).toMatchObject({ chatCostUsd: '0.000027000000000000', embeddingCostUsd: '0.000027000000000000' });
});

it('stops as duplicate before any model call when another execution owns the claim', async () => {
  const calls: Call[] = [];
  const { result } = await run(
    stubActivities(calls, {
      claim: async () => ({ claimed: false, ownerWorkflowRunId: 'the-owner', generation: 1, ownerStatus: 'failed' }),
    }),
    task(),
  );

  expect(result).toMatchObject({ status: 'duplicate', ownerRunId: 'the-owner' });
  expect(names(calls)).toEqual(['claimAndReserve']);
});

it('records a failure on the claim (with the innermost message) and fails the run', async () => {
  const calls: Call[] = [];
  const { error } = await run(
    stubActivities(calls, {
      callChat: async () => {
        throw ApplicationFailure.nonRetryable('no price in force for model "x"', 'NoPriceError');
      },
    }),
    task(),
  );

  expect(error).toBeInstanceOf(WorkflowFailedError);
  expect(names(calls)).toEqual(['claimAndReserve', 'callChat', 'releaseBudget', 'completeRun']);
  expect(inputsOf(calls, 'completeRun')).toEqual([
    { idempotencyKey: 'cron:branchy:2026-11-02T09:00Z', status: 'failed', error: 'no price in force for model "x"' },
  ]);
});

it('a cancel during a call records the claim as cancelled', async () => {
  const calls: Call[] = [];
  let started!: () => void;
  const callStarted = new Promise<void>((resolve) => (started = resolve));
  const { error } = await run(
    stubActivities(calls, {
      callChat: async () => {
        started();
        // a provider that never answers; the heartbeat carries the cancel to this activity
        for (;;) {
          Context.current().heartbeat();
          await Context.current().sleep(100);
        }
      },
    }),
    task(),
    {
      during: async (handle) => {
        await callStarted;
        await handle.cancel();
      },
    },
  );

  expect(error).toBeInstanceOf(WorkflowFailedError);
  expect((error as WorkflowFailedError).cause).toBeInstanceOf(CancelledFailure);
  expect(names(calls)).toEqual(['claimAndReserve', 'callChat', 'releaseBudget', 'completeRun']);
  expect(inputsOf(calls, 'completeRun')).toMatchObject([{ status: 'cancelled' }]);
});

it('a cancel that arrives while the provider answers still books the answer, then records the claim as cancelled', async () => {
  const calls: Call[] = [];
  let started!: () => void;
  const callStarted = new Promise<void>((resolve) => (started = resolve));
  const { error } = await run(
    stubActivities(calls, {
      callChat: async (input) => {
        started();
        // the answer is on its way: wait until the cancel has reached us, then return the billed answer anyway
        while (!Context.current().cancellationSignal.aborted) {
          Context.current().heartbeat();
          await new Promise((r) => setTimeout(r, 50));
        }
        return answered(input);
      },
    }),
    task(),
    {
      during: async (handle) => {
        await callStarted;
        await handle.cancel();
      },
    },
  );

  expect(error).toBeInstanceOf(WorkflowFailedError);
  expect(names(calls)).toEqual(['claimAndReserve', 'callChat', 'bookUsage', 'releaseBudget', 'completeRun']);
  expect(inputsOf<BookUsageInput>(calls, 'bookUsage').map((b) => [b.step, b.attempt, b.status])).toEqual([['chat', 1, 'ok']]);
  expect(inputsOf(calls, 'completeRun')).toMatchObject([{ status: 'cancelled' }]);
});

it('a billed failure is booked as failed and the step called again under the next attempt number', async () => {
  const calls: Call[] = [];
  const { result } = await run(
    stubActivities(calls, { callChat: async (input) => (input.attempt === 1 ? billedFailure(input) : answered(input)) }),
    task(),
  );

  expect(result?.status).toBe('completed');
  expect(inputsOf<ModelCallInput>(calls, 'callChat').map((c) => c.attempt)).toEqual([1, 2]);
  expect(bookingsOf(calls).map((b) => [b.step, b.attempt, b.status, b.requestId])).toEqual([
    ['chat', 1, 'failed', 'req-chat-1'],
    ['chat', 2, 'ok', 'req-chat-2'],
    ['embed', 1, 'ok', 'req-embed-1'],
  ]);
});

it(`billed failures are re-called at most ${MAX_CALLS_PER_STEP} times per step, each booked, then the run fails`, async () => {
  const calls: Call[] = [];
  const { error } = await run(stubActivities(calls, { callChat: async (input) => billedFailure(input) }), task());

  expect(error).toBeInstanceOf(WorkflowFailedError);
  expect((error as WorkflowFailedError).cause).toMatchObject({ type: 'BilledFailuresExhausted' });
  expect(inputsOf<BookUsageInput>(calls, 'bookUsage').map((b) => [b.attempt, b.status])).toEqual(
    Array.from({ length: MAX_CALLS_PER_STEP }, (_, i) => [i + 1, 'failed']),
  );
  expect(inputsOf(calls, 'completeRun')).toMatchObject([{ status: 'failed' }]);
});

it('a database outage while booking (the completing step too) delays the booking and never repeats the call', async () => {
  const calls: Call[] = [];
  let bookings = 0;
  const { result } = await run(
    stubActivities(calls, {
      bookUsage: async () => {
        // PostgreSQL is down for the chat's first two bookings and the embedding's first
        if (++bookings <= 2 || bookings === 4) throw new Error('connect ECONNREFUSED 127.0.0.1:5432');
        return { booked: 'ledger', costUsd: '0.000027000000000000' };
      },
    }),
    task(),
  );

  expect(result?.status).toBe('completed');
  expect(names(calls)).toEqual([
    'claimAndReserve',
    'callChat',
    'bookUsage',
    'bookUsage',
    'bookUsage',
    'callEmbedding',
    'bookUsageAndCompleteRun',
    'bookUsageAndCompleteRun',
  ]);
});

it('usage the ledger had to keep in usage_exceptions fails the run (after it was kept), naming why', async () => {
  const calls: Call[] = [];
  const { error } = await run(
    stubActivities(calls, {
      bookUsage: async () => ({ booked: 'exception', exceptionId: '7', reason: 'promptTokens = -1 is not a token count' }),
    }),
    task(),
  );

  expect(error).toBeInstanceOf(WorkflowFailedError);
  expect((error as WorkflowFailedError).cause).toMatchObject({ type: 'UnbookableUsage' });
  expect(inputsOf(calls, 'completeRun')).toMatchObject([{ status: 'failed', error: expect.stringMatching(/usage_exceptions.*-1/) }]);
});

it("the embedding's usage kept in usage_exceptions by the completing step fails the run and closes the claim as failed", async () => {
  const calls: Call[] = [];
  const { error } = await run(
    stubActivities(calls, {
      bookUsageAndCompleteRun: async () => ({ booked: 'exception', exceptionId: '8', reason: 'no price in force' }),
    }),
    task(),
  );

  expect(error).toBeInstanceOf(WorkflowFailedError);
  expect((error as WorkflowFailedError).cause).toMatchObject({ type: 'UnbookableUsage' });
  expect(names(calls).slice(-3)).toEqual(['bookUsageAndCompleteRun', 'releaseBudget', 'completeRun']);
  expect(inputsOf(calls, 'completeRun')).toMatchObject([
    { status: 'failed', error: expect.stringMatching(/embed: usage kept in usage_exceptions/) },
  ]);
});

it('a manual trigger claims manual:<taskId>:<start second>, not the slot, and says it was manual', async () => {
  const calls: Call[] = [];
  const { result } = await run(stubActivities(calls), task({ manual: true }), { workflowId: `cron-branchy-manual-2026-11-05T10:11:12Z` });

  expect(result).toMatchObject({ status: 'completed', manual: true, idempotencyKey: 'manual:branchy:2026-11-05T10:11:12Z' });
  expect(inputsOf(calls, 'claimAndReserve')).toMatchObject([{ idempotencyKey: 'manual:branchy:2026-11-05T10:11:12Z', manual: true }]);
});

it('a retry names the execution whose claim it may take over; a schedule firing names none', async () => {
  const calls: Call[] = [];
  await run(stubActivities(calls), task({ retry: { supersedesRunId: 'failed-run-id' } }));
  await run(stubActivities(calls), task());

  const claims = inputsOf<{ supersedesRunId?: string }>(calls, 'claimAndReserve');
  expect(claims[0].supersedesRunId).toBe('failed-run-id');
  expect(claims[1]).not.toHaveProperty('supersedesRunId');
});

it('the bookkeeping steps run as local activities: only the two model calls are activity tasks on the server', async () => {
  const calls: Call[] = [];
  const { result, workflowId, runId } = await run(stubActivities(calls), task());

  expect(result?.status).toBe('completed');
  const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
  const scheduled = (history.events ?? []).flatMap((e) => e.activityTaskScheduledEventAttributes?.activityType?.name ?? []);
  expect(scheduled).toEqual(['callChat', 'callEmbedding']);
  // claim with its reservation (one step), the chat's booking, the embedding's booking with memory and completion (one
  // step): local-activity markers
  const markers = (history.events ?? []).filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity');
  expect(markers).toHaveLength(3);
  // one path, so no patch markers
  expect((history.events ?? []).filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_patch')).toEqual([]);
});

it('budget exhausted before a call made again: the run ends blocked, makes no further call, releases what it holds', async () => {
  const calls: Call[] = [];
  const blocked = {
    tier: 'blocked' as const,
    worstCaseUsd: '0.000600000000000000',
    eventIds: [],
    limitUsd: '0.001000000000000000',
    spentUsd: '0.000700000000000000',
    reservedUsd: '0.000100000000000000',
    timeZone: 'UTC',
    month: '2026-11',
  };
  const { result, error } = await run(
    stubActivities(calls, {
      callChat: async (input) => billedFailure(input),
      reserveBudget: async (input) =>
        input.again
          ? blocked
          : {
              ...blocked,
              tier: 'default',
              models: { chat: input.model, embed: input.embeddingModel },
              limitUsd: '0.001000000000000000',
              spentUsd: '0',
              reservedUsd: '0',
            },
    }),
    task(),
  );

  expect(error).toBeUndefined(); // Temporal closes it Completed
  expect(result).toMatchObject({
    status: 'blocked',
    tier: 'blocked',
    budget: { limitUsd: '0.001000000000000000', spentUsd: '0.000700000000000000', blockedBefore: 'chat call 2' },
  });
  // the billed call 1 is booked; call 2 is never made; what the run held goes back; the claim closes blocked
  expect(names(calls)).toEqual(['claimAndReserve', 'callChat', 'bookUsage', 'reserveBudget', 'releaseBudget', 'completeRun']);
  expect(inputsOf<BookUsageInput>(calls, 'bookUsage').map((b) => [b.step, b.attempt, b.status])).toEqual([['chat', 1, 'failed']]);
  expect(inputsOf(calls, 'completeRun')).toMatchObject([
    { status: 'blocked', tier: 'blocked', budget: { spentUsd: '0.000700000000000000', blockedBefore: 'chat call 2' } },
  ]);
});
