import type pg from 'pg';
import { budgetStatus, type BudgetStatus } from '../budgets/budget-status';
import { usdOf } from '../budgets/tier';
import { slotClaimMinutes } from '../db/runs';
import { appliedVersion } from '../db/task-versions';
import { displayUsd } from '../money';
import { simulateBackfill, type BackfillSimulation, type RunCost } from './projection';
import { budgetBands, runCosts } from './run-costs';

/** One slot a backfill would start. */
export interface PlannedSlot {
  taskId: string;
  userId: string;
  fingerprint: string;
  slot: Date;
}

/** Per user, what the backfill's unclaimed slots would cost now and what the guard would make of them. */
export interface BackfillBudget extends BackfillSimulation {
  userId: string;
  month: string;
  limitUsd: string | null;
  spentUsd: string;
  reservedUsd: string;
  /** Slots with no claim yet (all of them without a limit): a claimed one ends as a duplicate and spends nothing. */
  slots: number;
  alreadyClaimed: number;
  costs: ({ taskId: string } & RunCost)[];
}

/**
 * Whether a backfill fits each user's budget: a backfilled run decides and books now, so against this month's spent +
 * reserved, with each unclaimed slot at its task's median cost per run (the forecast's, the guard's worst case for a
 * task with fewer than 5 completed runs), in slot order.
 */
export async function backfillBudget(db: pg.Pool, plan: PlannedSlot[], at?: Date): Promise<BackfillBudget[]> {
  const now = at ?? (await db.query<{ now: Date }>('select now() as now')).rows[0].now;
  const users = [...new Set(plan.map((p) => p.userId))].sort();
  const statuses = new Map<string, BudgetStatus>();
  for (const userId of users) statuses.set(userId, (await budgetStatus(db, { userId, at: now }))[0]);
  // Without a limit every slot fits: no cost is needed (nor a price for a worst case).
  const limited = plan.filter((p) => statuses.get(p.userId)!.limitUsd !== null);
  const taskIds = [...new Set(limited.map((p) => p.taskId))];
  const claimed = new Set<string>();
  const definitions = [];
  for (const taskId of taskIds) {
    const mine = limited.filter((p) => p.taskId === taskId);
    const times = mine.map((p) => p.slot.getTime());
    const minutes = await slotClaimMinutes(db, taskId, new Date(Math.min(...times)), new Date(Math.max(...times)));
    for (const m of minutes) claimed.add(`${taskId} ${m.getTime()}`);
    definitions.push({ taskId, definition: await appliedVersion(db, taskId, mine[0].fingerprint) });
  }
  const costs = await runCosts(db, definitions, now);
  const bands = await budgetBands(db);
  return users.map((userId): BackfillBudget => {
    const status = statuses.get(userId)!;
    const mine = plan.filter((p) => p.userId === userId).sort((a, b) => a.slot.getTime() - b.slot.getTime());
    const open = mine.filter((p) => !claimed.has(`${p.taskId} ${p.slot.getTime()}`));
    const zero = usdOf(0n);
    const sim = simulateBackfill({
      runCostsUsd: open.map((p) => costs.get(p.taskId)?.medianUsd ?? zero),
      capBlocked: open.map((p) => costs.get(p.taskId)?.capped?.choice === 'blocked'),
      spentUsd: status.spentUsd,
      reservedUsd: status.reservedUsd,
      limitUsd: status.limitUsd,
      bands,
    });
    return {
      userId,
      month: status.month,
      limitUsd: status.limitUsd,
      spentUsd: status.spentUsd,
      reservedUsd: status.reservedUsd,
      slots: open.length,
      alreadyClaimed: mine.length - open.length,
      costs: [...new Set(mine.map((p) => p.taskId))].flatMap((taskId) => {
        const c = costs.get(taskId);
        return c ? [{ taskId, ...c }] : [];
      }),
      ...sim,
    };
  });
}

/** One line per user: what the guard would do with the slots, and the figures behind it. */
export function backfillBudgetLine(b: BackfillBudget): string {
  const limit = b.limitUsd === null ? 'no limit' : `limit ${displayUsd(b.limitUsd)}`;
  const per =
    b.costs.length === 0
      ? 'no limit, so no cost per run is needed'
      : b.costs
          .map(
            (c) =>
              `${c.taskId} ${displayUsd(c.medianUsd)}/run (${c.basis === 'runs' ? `median of ${c.runs} runs` : c.basis === 'worst-case' ? 'worst case' : 'no applied version'})`,
          )
          .join(', ');
  return (
    `${b.userId}: ${b.slots} slot${b.slots === 1 ? '' : 's'} to run (${b.alreadyClaimed} already claimed): ` +
    `would run ${b.run}, be downgraded ${b.downgraded}, be blocked ${b.blocked}; ` +
    `spent ${displayUsd(b.spentUsd)} + reserved ${displayUsd(b.reservedUsd)} + slots = ${displayUsd(b.totalUsd)}, ${limit}; ${per}`
  );
}
