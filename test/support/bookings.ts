import type { UsageBooking } from '../../src/ledger/record-usage';
import { fullUsage } from '../../src/models/provider';

/** A small chat call of openai/gpt-4o-mini outside any run, for tests that need ledger rows of a given user or day. */
export const chatBooking = (idempotencyKey: string, userId: string, occurredAt: Date): UsageBooking => ({
  runId: null,
  idempotencyKey,
  step: 'chat',
  attempt: 1,
  userId,
  taskId: null,
  model: 'openai/gpt-4o-mini',
  kind: 'chat',
  status: 'ok',
  usage: fullUsage({ promptTokens: 100, cachedPromptTokens: 0, completionTokens: 10, reasoningTokens: 0 }),
  providerModel: null,
  providerRequestId: null,
  workerId: 'test',
  occurredAt,
});
