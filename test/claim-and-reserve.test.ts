import { afterAll, beforeAll, expect, it } from 'vitest';
import { applyBudgets } from '../src/budgets/budgets-store';
import { claimAndReserve, type ClaimReservation } from '../src/budgets/reserve';
import type { ClaimRequest } from '../src/db/runs';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { createTestContext, type TestContext } from './support/context';
import { fullUsage } from '../src/models/provider';

/**
 * The claim and the run's first reservation in one statement (claim_and_reserve), on a real PostgreSQL:
 * a claim lost to another execution reserves nothing, and the same execution running the step again (a local activity
 * re-run after its worker died) gets the same claim and the same reservation back, never a second one.
 */

let ctx: TestContext;
const at = new Date('2026-08-10T12:00:00Z');

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
});

afterAll(async () => {
  await ctx?.close();
});

let users = 0;
/** A user with a one-dollar limit this month, and a slot key of their own. */
async function freshUser(limit = '1') {
  const user = `fold-${++users}`;
  await applyBudgets(
    ctx.operatorPool,
    { budgets: [{ userId: user, monthlyLimitUsd: limit, timeZone: 'UTC', effectiveFrom: new Date('2026-08-01T00:00:00Z') }] },
    'test',
  );
  return { user, key: `cron:fold-task-${users}:2026-08-10T12:00Z` };
}

const claimOf = (key: string, user: string, runId: string): ClaimRequest => ({
  idempotencyKey: key,
  taskId: `fold-task-${users}`,
  userId: user,
  workflowId: `wf-${key}`,
  temporalRunId: runId,
  scheduledMinute: '2026-08-10T12:00Z',
  workerId: 'test-worker',
});

/** The run's chat and embedding calls: $0.000635 together on the default models (gpt-4o-mini, text-embedding-3-small). */
const reservation: ClaimReservation = {
  at,
  expirySeconds: 3600,
  calls: [
    {
      step: 'chat',
      attempt: 1,
      kind: 'chat',
      model: 'openai/gpt-4o-mini',
      worstCase: fullUsage({ promptTokens: 100, cachedPromptTokens: 0, completionTokens: 1000, reasoningTokens: 0 }),
    },
    {
      step: 'embed',
      attempt: 1,
      kind: 'embedding',
      model: 'openai/text-embedding-3-small',
      worstCase: fullUsage({ promptTokens: 1000, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 }),
    },
  ],
};

const reservationsOf = async (runId: string) =>
  (
    await ctx.pool.query<{ idempotency_key: string; amount_usd: string; status: string }>(
      'select idempotency_key, amount_usd::text, status from budget_reservations where run_id = $1 order by idempotency_key',
      [runId],
    )
  ).rows;

it('a claim lost to another execution reserves nothing, and says who owns the slot', async () => {
  const { user, key } = await freshUser();
  const owner = await claimAndReserve(ctx.pool, claimOf(key, user, 'run-owner'), reservation);
  expect(owner.claim).toEqual({ claimed: true, ownerWorkflowRunId: 'run-owner', generation: 1 });
  expect(owner.decision).toMatchObject({ tier: 'default', worstCaseUsd: '0.000635000000000000' });

  const lost = await claimAndReserve(ctx.pool, claimOf(key, user, 'run-duplicate'), reservation);
  expect(lost).toEqual({
    claim: { claimed: false, ownerWorkflowRunId: 'run-owner', generation: 1, ownerStatus: 'running' },
    decision: null,
  });
  expect(await reservationsOf('run-duplicate')).toEqual([]);
  expect(await reservationsOf('run-owner')).toHaveLength(2);
});

it('the same execution running the step again gets the same claim and the same reservation, not a second one', async () => {
  const { user, key } = await freshUser();
  const first = await claimAndReserve(ctx.pool, claimOf(key, user, 'run-rerun'), reservation);
  const before = await reservationsOf('run-rerun');
  const again = await claimAndReserve(ctx.pool, claimOf(key, user, 'run-rerun'), reservation);

  expect(again.claim).toEqual(first.claim);
  expect(again.decision).toMatchObject({
    tier: first.decision?.tier,
    worstCaseUsd: first.decision?.worstCaseUsd,
    models: { chat: 'openai/gpt-4o-mini', embed: 'openai/text-embedding-3-small' },
  });
  expect(await reservationsOf('run-rerun')).toEqual(before);
  expect(before.map((r) => r.idempotency_key)).toEqual(['run-rerun:chat:1', 'run-rerun:embed:1']);
  // one attempt row, one claim: the re-run recorded nothing twice
  const attempts = await ctx.pool.query('select count(*)::int as n from run_attempts where idempotency_key = $1', [key]);
  expect(attempts.rows[0].n).toBe(1);
});

it('executions racing for one slot: one claim, and only the winner holds a reservation', async () => {
  const { user, key } = await freshUser();
  const racers = await Promise.all(
    Array.from({ length: 12 }, (_, i) => claimAndReserve(ctx.pool, claimOf(key, user, `run-racer-${i}`), reservation)),
  );
  const winners = racers.filter((r) => r.claim.claimed);
  expect(winners).toHaveLength(1);
  expect(racers.filter((r) => r.decision !== null)).toHaveLength(1);
  const held = await ctx.pool.query<{ run_id: string }>('select distinct run_id from budget_reservations where user_id = $1', [user]);
  expect(held.rows).toEqual([{ run_id: winners[0].claim.ownerWorkflowRunId }]);
});

it('a claim won on a spent budget is blocked with the reason and holds no reservation', async () => {
  const { user, key } = await freshUser('0.0001');
  const r = await claimAndReserve(ctx.pool, claimOf(key, user, 'run-blocked'), reservation);
  expect(r.claim.claimed).toBe(true);
  expect(r.decision).toMatchObject({ tier: 'blocked', limitUsd: '0.000100000000000000', spentUsd: '0.000000000000000000' });
  expect(await reservationsOf('run-blocked')).toEqual([]);
});

it("a chat's worst case is its dearest prompt class, and above the long-context threshold the dearer of both contexts' prices", async () => {
  // claude-sonnet-4-5 (standard prices v3): prompt classes 3 / 0.30 / 3.75 / 6, output 15 per 1M tokens; above 200,000
  // prompt tokens 6 / 0.60 / 7.50 / 12, output 22.50. The embedding: 1,000 tokens at 0.02 per 1M, 0.00002.
  const worstCaseOf = async (promptTokens: number) => {
    const { user, key } = await freshUser('100');
    const chat = { ...reservation.calls[0], model: 'anthropic/claude-sonnet-4-5' };
    chat.worstCase = { ...chat.worstCase, promptTokens };
    const r = await claimAndReserve(ctx.pool, claimOf(key, user, `run-long-${promptTokens}`), {
      ...reservation,
      calls: [chat, reservation.calls[1]],
    });
    return r.decision?.worstCaseUsd;
  };
  // at the threshold: 200,000 x 6 + 1,000 x 15 per 1M = 1.215
  expect(await worstCaseOf(200_000)).toBe('1.215020000000000000');
  // above it: the long-context price of all 250,000 (250,000 x 12 + 1,000 x 22.50 per 1M = 3.0225), dearer than the
  // threshold's 200,000 at the base prices (1.215)
  expect(await worstCaseOf(250_000)).toBe('3.022520000000000000');
});
