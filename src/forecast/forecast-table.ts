import { displayUsd } from '../money';
import type { TaskForecast, UserForecast } from './month-forecast';
import type { Crossing } from './projection';

/** How a task's cost per run was found, for tables: "30 runs", or the worst case flagged with why. */
export function costBasisText(t: TaskForecast): string {
  switch (t.cost.basis) {
    case 'runs':
      return `${t.cost.runs} runs`;
    case 'worst-case':
      return `worst case (${t.cost.runs} run${t.cost.runs === 1 ? '' : 's'})`;
    case 'unapplied':
      return 'no applied version';
  }
}

/** "2026-11-23" at the median, with the high figure's day when it is another, "-" when never reached. */
export function crossingText(c: Crossing | undefined): string {
  if (!c || (c.medianDay === null && c.highDay === null)) return '-';
  if (c.medianDay === c.highDay) return c.medianDay!;
  return `${c.medianDay ?? '-'} (high ${c.highDay ?? '-'})`;
}

export function taskForecastTable(tasks: TaskForecast[]): { headers: string[]; rows: string[][]; right: number[] } {
  return {
    headers: ['Task', 'User', 'State', 'Slots left', 'Cost/run median', 'Cost/run p95', 'From', 'Forecast median', 'Forecast high'],
    rows: tasks.map((t) => [
      t.taskId,
      t.userId,
      t.state,
      String(t.slotsLeft),
      displayUsd(t.cost.medianUsd),
      displayUsd(t.cost.p95Usd),
      costBasisText(t),
      displayUsd(t.medianUsd),
      displayUsd(t.highUsd),
    ]),
    right: [3, 4, 5, 7, 8],
  };
}

/** The per-user forecast columns (`budgets status` appends them to its own). */
export const userForecastHeaders = ['Forecast median', 'Forecast high', '80 % on', '100 % on'];
export const userForecastCells = (u: UserForecast | undefined): string[] =>
  u === undefined
    ? ['-', '-', '-', '-']
    : [
        displayUsd(u.medianUsd),
        displayUsd(u.highUsd),
        crossingText(u.crossings.find((c) => c.tier === 'cheap')),
        crossingText(u.crossings.find((c) => c.tier === 'blocked')),
      ];

export function userForecastTable(users: UserForecast[]): { headers: string[]; rows: string[][]; right: number[] } {
  return {
    headers: ['User', 'Month', 'Zone', 'Limit', 'Spent', 'Reserved', ...userForecastHeaders],
    rows: users.map((u) => [
      u.userId,
      u.month,
      u.timeZone,
      u.limitUsd === null ? 'no limit' : displayUsd(u.limitUsd),
      displayUsd(u.spentUsd),
      displayUsd(u.reservedUsd),
      ...userForecastCells(u),
    ]),
    right: [3, 4, 5, 6, 7],
  };
}
