import type { Client, ScheduleOptions } from '@temporalio/client';
import { MANAGED_BY_MEMO_KEY, MANAGED_BY_VALUE, ROLLUP_SCHEDULE_ID } from '../constants';
import { fingerprintOf } from '../hash';
import { rollupRefresh } from '../workflows/rollup-refresh';
import { reconcileSchedule } from './reconcile-schedule';

/** How often the rollup queues are folded in: reports and the admin page are at most this far behind the ledger. */
export const ROLLUP_REFRESH_EVERY = '1 minute';

const fingerprint = (taskQueue: string): string =>
  fingerprintOf({ every: ROLLUP_REFRESH_EVERY, taskQueue, workflowType: rollupRefresh.name, version: 1 });

/**
 * The rollup refresh schedule: `rollupRefresh` every minute, as `rollup-refresh-<nominal time>`. A run drains
 * everything queued, so a run still going when the next is due makes that one skip (SKIP), and missed runs are not
 * caught up beyond the last minute: the next run folds whatever they would have.
 */
export function rollupScheduleOptions(taskQueue: string): ScheduleOptions {
  return {
    scheduleId: ROLLUP_SCHEDULE_ID,
    spec: { intervals: [{ every: ROLLUP_REFRESH_EVERY }] },
    action: {
      type: 'startWorkflow',
      workflowType: rollupRefresh,
      workflowId: ROLLUP_SCHEDULE_ID,
      taskQueue,
      args: [],
      memo: { fingerprint: fingerprint(taskQueue) },
    },
    policies: { overlap: 'SKIP', catchupWindow: '1 minute' },
    state: { note: 'managed by cronledger (tasks apply / report schedule)' },
    memo: { [MANAGED_BY_MEMO_KEY]: MANAGED_BY_VALUE, kind: 'rollups' },
  };
}

/**
 * Creates or updates the `rollup-refresh` schedule on `taskQueue`; running it again changes nothing. A schedule with
 * that ID that cronledger did not create is never touched.
 */
export async function ensureRollupSchedule(client: Client, opts: { taskQueue: string }): Promise<'created' | 'updated' | 'unchanged'> {
  const reconciled = await reconcileSchedule(client, {
    options: rollupScheduleOptions(opts.taskQueue),
    fingerprint: fingerprint(opts.taskQueue),
    kind: 'rollups',
    notOurs: `schedule ${ROLLUP_SCHEDULE_ID} exists but was not created by cronledger; delete it yourself or set "monthlyReport": false`,
  });
  return reconciled.outcome;
}
