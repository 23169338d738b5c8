import type { Client, ScheduleOptions } from '@temporalio/client';
import { BUDGET_SWEEP_SCHEDULE_ID, MANAGED_BY_MEMO_KEY, MANAGED_BY_VALUE } from '../constants';
import { fingerprintOf } from '../hash';
import { budgetSweep } from '../workflows/budget-sweep';
import { reconcileSchedule } from './reconcile-schedule';

/** How often the sweeper runs: an expired reservation or an undelivered event waits at most this long. */
export const BUDGET_SWEEP_EVERY = '1 minute';

const fingerprint = (taskQueue: string): string =>
  fingerprintOf({ every: BUDGET_SWEEP_EVERY, taskQueue, workflowType: budgetSweep.name, version: 1 });

/**
 * The `budget-sweep` schedule: budgetSweep every minute, one at a time (a pass still running makes the next one skip),
 * and missed passes are not caught up (the next pass sweeps everything that is due anyway).
 */
export function budgetSweepScheduleOptions(taskQueue: string): ScheduleOptions {
  return {
    scheduleId: BUDGET_SWEEP_SCHEDULE_ID,
    spec: { intervals: [{ every: BUDGET_SWEEP_EVERY }] },
    action: {
      type: 'startWorkflow',
      workflowType: budgetSweep,
      workflowId: BUDGET_SWEEP_SCHEDULE_ID,
      taskQueue,
      args: [],
      workflowExecutionTimeout: '10 minutes',
      memo: { fingerprint: fingerprint(taskQueue) },
    },
    policies: { overlap: 'SKIP', catchupWindow: '1 minute' },
    state: { note: 'managed by cronledger (tasks apply / dev up): releases expired budget reservations, re-delivers budget events' },
    memo: { [MANAGED_BY_MEMO_KEY]: MANAGED_BY_VALUE, kind: 'budget-sweep' },
  };
}

/**
 * Creates or updates the `budget-sweep` schedule on `taskQueue`. Running it again changes nothing; concurrent callers
 * converge. A schedule with that ID that cronledger did not create is never touched; a paused one stays paused.
 */
export async function ensureBudgetSweepSchedule(client: Client, opts: { taskQueue: string }): Promise<'created' | 'updated' | 'unchanged'> {
  const reconciled = await reconcileSchedule(client, {
    options: budgetSweepScheduleOptions(opts.taskQueue),
    fingerprint: fingerprint(opts.taskQueue),
    kind: 'budget-sweep',
    notOurs: `schedule ${BUDGET_SWEEP_SCHEDULE_ID} exists but was not created by cronledger; delete it yourself or set "budgetSweep": false`,
  });
  return reconciled.outcome;
}
