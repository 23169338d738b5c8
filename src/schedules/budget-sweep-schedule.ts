import type { Client, ScheduleOptions } from '@temporalio/client';
import { BUDGET_SWEEP_SCHEDULE_ID } from '../constants';
import { budgetSweep } from '../workflows/budget-sweep';
import { ensureMaintenanceSchedule, maintenanceScheduleOptions, type MaintenanceSchedule } from './maintenance-schedule';

/** How often the sweeper runs: an expired reservation or an undelivered event waits at most this long. */
export const BUDGET_SWEEP_EVERY = '1 minute';

/** The `budget-sweep` schedule: budgetSweep every minute, releasing expired reservations and re-delivering events. */
const BUDGET_SWEEP: MaintenanceSchedule = {
  scheduleId: BUDGET_SWEEP_SCHEDULE_ID,
  every: BUDGET_SWEEP_EVERY,
  workflow: budgetSweep,
  kind: 'budget-sweep',
  note: 'managed by cronledger (tasks apply / dev up): releases expired budget reservations, re-delivers budget events',
  notOurs: `schedule ${BUDGET_SWEEP_SCHEDULE_ID} exists but was not created by cronledger; delete it yourself or set "budgetSweep": false`,
  workflowExecutionTimeout: '10 minutes',
};

export const budgetSweepScheduleOptions = (taskQueue: string): ScheduleOptions => maintenanceScheduleOptions(BUDGET_SWEEP, taskQueue);

/** Creates or updates the `budget-sweep` schedule on `taskQueue` (see ensureMaintenanceSchedule). */
export const ensureBudgetSweepSchedule = (client: Client, opts: { taskQueue: string }): Promise<'created' | 'updated' | 'unchanged'> =>
  ensureMaintenanceSchedule(client, BUDGET_SWEEP, opts.taskQueue);
