import type { Client, ScheduleOptions } from '@temporalio/client';
import { MANAGED_BY_MEMO_KEY, MANAGED_BY_VALUE } from '../constants';
import { fingerprintOf } from '../hash';
import { reconcileSchedule } from './reconcile-schedule';

/**
 * A cronledger housekeeping job on a Temporal Schedule of its own (the rollup refresh, the budget sweep): a workflow
 * without arguments started every `every`, one at a time (a pass still running makes the next one skip), missed passes
 * not caught up beyond one interval, since the next pass does whatever they would have.
 */
export interface MaintenanceSchedule {
  scheduleId: string;
  every: string;
  /** The workflow function; its name is the workflow type. */
  workflow: () => Promise<unknown>;
  /** The memo's `kind`, which tells cronledger's own schedules apart. */
  kind: string;
  /** The schedule's note in the Web UI. */
  note: string;
  /** The error when a schedule of that ID exists that cronledger did not create: what to do about it. */
  notOurs: string;
  workflowExecutionTimeout?: string;
}

const fingerprint = (s: MaintenanceSchedule, taskQueue: string): string =>
  fingerprintOf({ every: s.every, taskQueue, workflowType: s.workflow.name, version: 1 });

export function maintenanceScheduleOptions(s: MaintenanceSchedule, taskQueue: string): ScheduleOptions {
  return {
    scheduleId: s.scheduleId,
    spec: { intervals: [{ every: s.every }] },
    action: {
      type: 'startWorkflow',
      workflowType: s.workflow.name,
      workflowId: s.scheduleId,
      taskQueue,
      args: [],
      ...(s.workflowExecutionTimeout ? { workflowExecutionTimeout: s.workflowExecutionTimeout } : {}),
      memo: { fingerprint: fingerprint(s, taskQueue) },
    },
    policies: { overlap: 'SKIP', catchupWindow: s.every },
    state: { note: s.note },
    memo: { [MANAGED_BY_MEMO_KEY]: MANAGED_BY_VALUE, kind: s.kind },
  };
}

/**
 * Creates or updates the schedule on `taskQueue`. Running it again changes nothing; concurrent callers converge. A
 * schedule with that ID that cronledger did not create is never touched; a paused one stays paused.
 */
export async function ensureMaintenanceSchedule(
  client: Client,
  s: MaintenanceSchedule,
  taskQueue: string,
): Promise<'created' | 'updated' | 'unchanged'> {
  const reconciled = await reconcileSchedule(client, {
    options: maintenanceScheduleOptions(s, taskQueue),
    fingerprint: fingerprint(s, taskQueue),
    kind: s.kind,
    notOurs: s.notOurs,
  });
  return reconciled.outcome;
}
