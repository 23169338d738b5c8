import type pg from 'pg';
import { UserError } from '../errors';
import { DEFAULT_PRICES_FILE, priceInForce } from '../ledger/prices';
import type { DowngradeSection } from './budget-file';

export interface AppliedDowngrade {
  model: string;
  cheapModel: string;
  action: 'added' | 'unchanged';
}

/**
 * Records each model's cheap model (a new version when it changed). Both must have a price in force now: a cheap model
 * nobody can price would be refused at call time, in the middle of a user's month, so it is refused here instead.
 */
export async function applyDowngrades(
  db: pg.PoolClient,
  section: DowngradeSection,
  source: string,
  now: Date,
): Promise<AppliedDowngrade[]> {
  const applied: AppliedDowngrade[] = [];
  for (const [model, cheapModel] of Object.entries(section)) {
    for (const [name, what] of [
      [model, 'model'],
      [cheapModel, 'cheap model'],
    ] as const) {
      await priceInForce(db, name, now).catch(() => {
        throw new UserError(
          `downgrade ${JSON.stringify(model)} → ${JSON.stringify(cheapModel)}: the ${what} ${JSON.stringify(name)} has no price in force; ` +
            `add it to a prices file (see ${DEFAULT_PRICES_FILE}) and run \`cronledger prices apply FILE\` first`,
        );
      });
    }
    if (model === cheapModel)
      throw new UserError(`downgrade ${JSON.stringify(model)} names itself as its cheap model; name a cheaper model`);
    const current = await cheapModelOf(db, model, now);
    if (current === cheapModel) {
      applied.push({ model, cheapModel, action: 'unchanged' });
      continue;
    }
    await db.query('select add_downgrade($1, $2, $3, $4)', [model, cheapModel, now, source]);
    applied.push({ model, cheapModel, action: 'added' });
  }
  return applied;
}

/** The cheap model in force for `model` at `at`, or null when it has none: the decision's own rule (budget_cheap_model). */
export async function cheapModelOf(db: pg.Pool | pg.PoolClient, model: string, at: Date): Promise<string | null> {
  const { rows } = await db.query<{ cheap_model: string | null }>('select budget_cheap_model($1, $2) as cheap_model', [model, at]);
  return rows[0].cheap_model;
}

/**
 * Every cheap model the downgrade map has named for `model`, in force or not: the models a run's chat may be called on
 * besides its own, whichever version the decision takes (so a bound computed over them holds for any of them).
 */
export async function cheapModelsEverNamed(db: pg.Pool | pg.PoolClient, model: string): Promise<string[]> {
  const { rows } = await db.query<{ cheap_model: string }>('select distinct cheap_model from model_downgrades where model = $1', [model]);
  return rows.map((r) => r.cheap_model);
}
