import type pg from 'pg';
import { inTransaction } from '../db/pool';
import type { BudgetChange, DowngradeSection } from './budget-file';
import { applyDowngrades, type AppliedDowngrade } from './downgrades';

/** A budgets row: money stays an exact decimal string. user_id null is the default budget. */
export interface BudgetRow {
  id: string;
  user_id: string | null;
  monthly_limit_usd: string;
  time_zone: string;
  effective_from: Date;
  source: string;
  created_at: Date;
}

/** The budget that governs a user at an instant: their own newest version in force, else the default's, else none. */
export interface BudgetInForce {
  userId: string;
  limitUsd: string | null;
  timeZone: string;
  /** Which row applies: the user's own, the default budget, or none at all (no limit). */
  source: 'user' | 'default' | 'none';
  budgetId: string | null;
}

/** The budget in force for a user at an instant, as the decision finds it (budget_in_force). */
export async function budgetInForce(db: pg.Pool | pg.PoolClient, userId: string, at: Date): Promise<BudgetInForce> {
  const { rows } = await db.query<BudgetRow>('select * from budget_in_force($1, $2)', [userId, at]);
  const row = rows[0];
  if (!row) return { userId, limitUsd: null, timeZone: 'UTC', source: 'none', budgetId: null };
  return {
    userId,
    limitUsd: row.monthly_limit_usd,
    timeZone: row.time_zone,
    source: row.user_id === null ? 'default' : 'user',
    budgetId: row.id,
  };
}

export interface AppliedBudget {
  userId: string | null;
  action: 'added' | 'unchanged';
  monthlyLimitUsd: string;
  timeZone: string;
  effectiveFrom: string;
}

export interface ApplyBudgetsResult {
  budgets: AppliedBudget[];
  downgrades: AppliedDowngrade[];
}

/**
 * Appends each budget version whose limit or zone differs from the one in force for that scope at its effective time,
 * and each changed downgrade, in one transaction: any refusal (a cheap model without a price) writes nothing.
 */
export async function applyBudgets(
  pool: pg.Pool,
  input: { budgets: BudgetChange[]; downgrade?: DowngradeSection },
  source: string,
): Promise<ApplyBudgetsResult> {
  return inTransaction(pool, async (db) => {
    await db.query(`select pg_advisory_xact_lock(hashtextextended('cronledger-budgets', 0))`);
    const now = (await db.query<{ now: Date }>('select now() as now')).rows[0].now;
    const budgets: AppliedBudget[] = [];
    for (const change of input.budgets) {
      const at = change.effectiveFrom ?? now;
      const current = await db.query<BudgetRow>(
        `select * from budgets where user_id is not distinct from $1 and effective_from <= $2 order by effective_from desc limit 1`,
        [change.userId, at],
      );
      const same =
        current.rows[0] &&
        current.rows[0].time_zone === change.timeZone &&
        (
          await db.query<{ same: boolean }>('select $1::numeric = $2::numeric as same', [
            current.rows[0].monthly_limit_usd,
            change.monthlyLimitUsd,
          ])
        ).rows[0].same;
      if (same) {
        const row = current.rows[0];
        budgets.push({
          userId: change.userId,
          action: 'unchanged',
          monthlyLimitUsd: row.monthly_limit_usd,
          timeZone: row.time_zone,
          effectiveFrom: row.effective_from.toISOString(),
        });
        continue;
      }
      const inserted = await db.query<BudgetRow>('select * from add_budget($1, $2, $3, $4, $5)', [
        change.userId,
        change.monthlyLimitUsd,
        change.timeZone,
        at,
        source,
      ]);
      const row = inserted.rows[0];
      budgets.push({
        userId: change.userId,
        action: 'added',
        monthlyLimitUsd: row.monthly_limit_usd,
        timeZone: row.time_zone,
        effectiveFrom: row.effective_from.toISOString(),
      });
    }
    const downgrades = input.downgrade ? await applyDowngrades(db, input.downgrade, source, now) : [];
    return { budgets, downgrades };
  });
}

/** Every budget version, defaults first, oldest first per scope. */
export async function listBudgets(db: pg.Pool): Promise<BudgetRow[]> {
  return (await db.query<BudgetRow>('select * from budgets order by user_id nulls first, effective_from')).rows;
}

/** Whether any budget was ever configured (the admin page shows "no budget" until one is). */
export async function anyBudget(db: pg.Pool | pg.PoolClient): Promise<boolean> {
  return (await db.query('select 1 from budgets limit 1')).rowCount === 1;
}
