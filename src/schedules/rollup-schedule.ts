import type { Client, ScheduleOptions } from '@temporalio/client';
import { ROLLUP_SCHEDULE_ID } from '../constants';
import { rollupRefresh } from '../workflows/rollup-refresh';
import { ensureMaintenanceSchedule, maintenanceScheduleOptions, type MaintenanceSchedule } from './maintenance-schedule';

/** How often the rollup queues are folded in: reports and the admin page are at most this far behind the ledger. */
export const ROLLUP_REFRESH_EVERY = '1 minute';

/** The `rollup-refresh` schedule: rollupRefresh every minute; a run drains everything queued. */
const ROLLUP_REFRESH: MaintenanceSchedule = {
  scheduleId: ROLLUP_SCHEDULE_ID,
  every: ROLLUP_REFRESH_EVERY,
  workflow: rollupRefresh,
  kind: 'rollups',
  note: 'managed by cronledger (tasks apply / report schedule)',
  notOurs: `schedule ${ROLLUP_SCHEDULE_ID} exists but was not created by cronledger; delete it yourself or set "monthlyReport": false`,
};

export const rollupScheduleOptions = (taskQueue: string): ScheduleOptions => maintenanceScheduleOptions(ROLLUP_REFRESH, taskQueue);

/** Creates or updates the `rollup-refresh` schedule on `taskQueue` (see ensureMaintenanceSchedule). */
export const ensureRollupSchedule = (client: Client, opts: { taskQueue: string }): Promise<'created' | 'updated' | 'unchanged'> =>
  ensureMaintenanceSchedule(client, ROLLUP_REFRESH, opts.taskQueue);
