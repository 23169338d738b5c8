import type pg from 'pg';
import { recordUsage } from '../../src/ledger/record-usage';
import { chatBooking } from './bookings';
import { fullUsage } from '../../src/models/provider';

const FREE = fullUsage({ promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 });

/** A chat call of `completionTokens` gpt-4o-mini tokens ($0.60 per million), booked at `at` (default: now). */
export const bookCompletion = (pool: pg.Pool, key: string, userId: string, completionTokens: number, at?: Date) =>
  recordUsage(pool, {
    ...chatBooking(key, userId, at ?? new Date()),
    usage: { ...FREE, completionTokens },
    ...(at ? {} : { occurredAt: undefined }),
  });

/**
 * Spend of exactly `amountUsd` (an exact decimal string) for a user: a free call plus an adjustment of that amount, so
 * tests reach amounts no token count would (exactly 80 % of a limit).
 */
export async function bookExactSpend(pool: pg.Pool, key: string, userId: string, amountUsd: string, at?: Date): Promise<void> {
  const entry = await bookCompletion(pool, key, userId, 0, at);
  await pool.query(
    `insert into usage_ledger (idempotency_key, entry_type, original_entry_id, reason, user_id, cost_usd, created_at)
     values ($1, 'adjustment', $2, 'test spend', $3, $4, coalesce($5, now()))`,
    [`${key}-adjust`, entry.id, userId, amountUsd, at ?? null],
  );
}
