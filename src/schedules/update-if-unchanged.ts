import type { Client, ScheduleDescription, ScheduleUpdateOptions } from '@temporalio/client';
// The SDK's own encoders, which handle.update() uses (not in the package's index; @temporalio/client is pinned exactly).
import {
  compileUpdatedScheduleOptions,
  encodeScheduleAction,
  encodeSchedulePolicies,
  encodeScheduleSpec,
  encodeScheduleState,
} from '@temporalio/client/lib/schedule-helpers.js';
import { randomUUID } from 'node:crypto';
import { UserError } from '../errors';

/**
 * Replaces the schedule's spec, action, policies and state with `updated`, unless anything changed it since `current`
 * was described: the update carries `current`'s conflict token, and Temporal's scheduler drops an update whose token is
 * stale (a pause, an unpause or another update moved it on). The call succeeds either way, so the caller describes
 * again to learn which happened. The SDK's handle.update() sends no token: an update that meets a pause (say, a task
 * paused for budget between the describe and the update) writes its whole state over it.
 */
export async function updateIfUnchanged(client: Client, current: ScheduleDescription, updated: ScheduleUpdateOptions): Promise<void> {
  const { options, workflowService } = client.schedule;
  const compiled = compileUpdatedScheduleOptions(current.scheduleId, updated);
  // the action keeps its headers, as handle.update() keeps them
  const header = current.raw.schedule?.action?.startWorkflow?.header?.fields ?? {};
  await workflowService.updateSchedule({
    namespace: options.namespace,
    scheduleId: current.scheduleId,
    schedule: {
      spec: encodeScheduleSpec(compiled.spec),
      action: await encodeScheduleAction(options.loadedDataConverter, options.namespace, compiled.action, header),
      policies: encodeSchedulePolicies(compiled.policies),
      state: encodeScheduleState(compiled.state),
    },
    conflictToken: current.raw.conflictToken,
    identity: options.identity,
    requestId: randomUUID(),
  });
}

/** How many updates one caller sends, each dropped because the schedule changed since its describe, before giving up. */
export const MAX_DROPPED_UPDATES = 5;

/** What a caller throws when each of its MAX_DROPPED_UPDATES updates met a change: exit 1, message only (a UserError). */
export const keptChanging = (scheduleId: string): UserError =>
  new UserError(
    `schedule ${scheduleId} changed under each of ${MAX_DROPPED_UPDATES} updates (something else keeps pausing or updating it); run the command again`,
    1,
  );
