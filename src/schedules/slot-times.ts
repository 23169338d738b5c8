import type { Client } from '@temporalio/client';
import Long from 'long';
import { randomUUID } from 'node:crypto';
import { matchingTimes, retryDeadlineExceeded } from '../temporal-reads';

export { matchingTimes };

type ScheduleSpec = NonNullable<NonNullable<Awaited<ReturnType<Client['workflowService']['describeSchedule']>>['schedule']>['spec']>;

/** Prefix of the short-lived, paused schedules that list nominal times; never `cron-`, so nothing mistakes one for a task. */
export const NOMINAL_PROBE_PREFIX = 'cronledger-nominal-times-';

/**
 * The *nominal* slot times of a schedule in [from, to], both inclusive, as computed by the Temporal server from the
 * schedule's own spec: the same engine that fires it, so backfilled IDs and claim keys match the scheduled ones.
 *
 * `ListScheduleMatchingTimes` returns jittered times for a schedule with jitter, while the schedule names and claims
 * each run by its nominal time (TemporalScheduledStartTime and the workflow ID suffix). So for a jittered schedule the
 * times are listed from a twin: a paused schedule with the same spec minus jitter, which can never fire (no remaining
 * actions, a workflow type and task queue nobody serves) and is deleted right after.
 */
export async function slotTimes(client: Client, scheduleId: string, from: Date, to: Date): Promise<Date[]> {
  const { namespace } = client.options;
  const described = await retryDeadlineExceeded(() => client.workflowService.describeSchedule({ namespace, scheduleId }));
  const spec = described.schedule?.spec;
  if (!spec) throw new Error(`schedule ${scheduleId} has no spec`);
  if (!hasJitter(spec)) return matchingTimes(client, scheduleId, from, to);

  const probeId = `${NOMINAL_PROBE_PREFIX}${scheduleId}-${randomUUID().slice(0, 8)}`;
  await client.workflowService.createSchedule({
    namespace,
    scheduleId: probeId,
    requestId: randomUUID(),
    identity: client.options.identity,
    schedule: {
      spec: { ...spec, jitter: null },
      action: {
        startWorkflow: {
          workflowId: probeId,
          workflowType: { name: 'cronledgerNominalTimesProbeNeverRuns' },
          taskQueue: { name: probeId },
        },
      },
      state: {
        paused: true,
        limitedActions: true,
        remainingActions: Long.ZERO,
        notes: `cronledger backfill: lists the nominal times of ${scheduleId}; never fires; deleted right after`,
      },
    },
  });
  try {
    return await matchingTimes(client, probeId, from, to);
  } finally {
    await client.workflowService.deleteSchedule({ namespace, scheduleId: probeId, identity: client.options.identity });
  }
}

const hasJitter = (spec: ScheduleSpec): boolean => Number(spec.jitter?.seconds ?? 0) > 0 || (spec.jitter?.nanos ?? 0) > 0;
