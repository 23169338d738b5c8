import { displayUsd } from '../money';
import type { TaskForecast, UserForecast } from './month-forecast';
import type { Crossing, SlotOutcomes } from './projection';

/**
 * How a task's cost per run was found, for tables: "30 runs", or the worst case flagged with why; "capped: cheap
 * models" or "capped: blocked" when its maxCostPerRun changed the figure.
 */
export function costBasisText(t: TaskForecast): string {
  const capped = t.cost.capped ? `; capped: ${t.cost.capped.choice === 'cheap' ? 'cheap models' : 'blocked'}` : '';
  switch (t.cost.basis) {
    case 'runs':
      return `${t.cost.runs} runs${capped}`;
    case 'worst-case':
      return `worst case (${t.cost.runs} run${t.cost.runs === 1 ? '' : 's'})${capped}`;
    case 'unapplied':
      return 'no applied version';
  }
}

/** The task's policies: "block" or "pause", with its cap per run when it has one. */
const policyText = (t: TaskForecast): string =>
  t.maxCostPerRunUsd === null ? t.onBudgetExhausted : `${t.onBudgetExhausted}, cap ${displayUsd(t.maxCostPerRunUsd)}`;

/** A count at the median cost per run, with the high figure's when it is another: "12", "12 (high 9)". */
function countText(o: { median: SlotOutcomes; high: SlotOutcomes }, key: keyof SlotOutcomes): string {
  const [m, h] = [o.median[key], o.high[key]];
  return m === h ? String(m) : `${m} (high ${h})`;
}
const outcomeCells = (o: { median: SlotOutcomes; high: SlotOutcomes }): string[] =>
  (['run', 'blocked', 'skipped'] as const).map((k) => countText(o, k));

/** "2026-11-23" at the median, with the high figure's day when it is another, "-" when never reached. */
export function crossingText(c: Crossing | undefined): string {
  if (!c || (c.medianDay === null && c.highDay === null)) return '-';
  if (c.medianDay === c.highDay) return c.medianDay!;
  return `${c.medianDay ?? '-'} (high ${c.highDay ?? '-'})`;
}

/**
 * Per task: its slots left, the cost of one run and how it was found, how the slots would end (run, blocked by the
 * limit or the cap, skipped while paused for budget) and what the slots that run would spend.
 */
export function taskForecastTable(tasks: TaskForecast[]): { headers: string[]; rows: string[][]; right: number[] } {
  return {
    headers: [
      'Task',
      'User',
      'State',
      'Policy',
      'Slots left',
      'Cost/run median',
      'Cost/run p95',
      'From',
      'Run',
      'Blocked',
      'Skipped',
      'Forecast median',
      'Forecast high',
    ],
    rows: tasks.map((t) => [
      t.taskId,
      t.userId,
      t.state,
      policyText(t),
      String(t.slotsLeft),
      displayUsd(t.cost.medianUsd),
      displayUsd(t.cost.p95Usd),
      costBasisText(t),
      ...outcomeCells(t.slotOutcomes),
      displayUsd(t.medianUsd),
      displayUsd(t.highUsd),
    ]),
    right: [4, 5, 6, 8, 9, 10, 11, 12],
  };
}

/** The per-user forecast columns (`budgets status` appends them to its own); `userForecastRight` are its numbers. */
export const userForecastHeaders = ['Forecast median', 'Forecast high', '80 % on', '100 % on', 'Slots run', 'Blocked', 'Skipped'];
export const userForecastRight = [0, 1, 4, 5, 6];
export const userForecastCells = (u: UserForecast | undefined): string[] =>
  u === undefined
    ? userForecastHeaders.map(() => '-')
    : [
        displayUsd(u.medianUsd),
        displayUsd(u.highUsd),
        crossingText(u.crossings.find((c) => c.tier === 'cheap')),
        crossingText(u.crossings.find((c) => c.tier === 'blocked')),
        ...outcomeCells(u.slotOutcomes),
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
    right: [3, 4, 5, ...userForecastRight.map((i) => 6 + i)],
  };
}
