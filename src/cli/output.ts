/** Small output helpers shared by the commands: aligned tables and stable JSON. */
import type { ApplyBudgetsResult } from '../budgets/budgets-store';
import { displayUsd } from '../money';
import { formatTable } from '../text-table';

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? v.toString() : v), 2)}\n`);
}

export function printTable(headers: string[], rows: string[][], right: number[] = []): void {
  process.stdout.write(`${formatTable(headers, rows, right)}\n`);
}

/** The budget and downgrade changes of `budgets apply|set` and `tasks apply`, a line each. */
export function printAppliedBudgets(result: ApplyBudgetsResult): void {
  for (const b of result.budgets) {
    const who = b.userId ?? 'default';
    process.stdout.write(
      `${b.action.padEnd(10)} budget ${who} ${displayUsd(b.monthlyLimitUsd)}/month (${b.timeZone}) from ${b.effectiveFrom}\n`,
    );
  }
  for (const d of result.downgrades) process.stdout.write(`${d.action.padEnd(10)} downgrade ${d.model} -> ${d.cheapModel}\n`);
}
