import { z } from 'zod';
import { MAX_TOKENS_PER_CALL } from '../constants';

const tokenCount = z.number().int().min(0).max(MAX_TOKENS_PER_CALL);

/** Token counts the mock model reports instead of tokenizing, to cost a planned workload; and failures to rehearse retries. */
export const simulateSchema = z
  .object({
    promptTokens: tokenCount.optional(),
    cachedPromptTokens: tokenCount.optional(),
    cacheWrite5mTokens: tokenCount.optional(),
    cacheWrite1hTokens: tokenCount.optional(),
    completionTokens: tokenCount.optional(),
    reasoningTokens: tokenCount.optional(),
    embeddingTokens: tokenCount.optional(),
    /** The service tier the mock says served each call (any name: a tier without a price is the ledger's to catch). */
    serviceTier: z.string().optional(),
    /** The mock fails this many attempts of each call after usage was produced (and booked as failed). */
    failFirstAttempts: z.number().int().min(0).max(10).optional(),
  })
  .strict();

export type SimulateProfile = z.infer<typeof simulateSchema>;
