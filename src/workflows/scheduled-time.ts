import type { WorkflowInfo } from '@temporalio/workflow';

/** `...-2026-11-02T09:00:00Z`: the suffix a schedule appends to its action's workflow ID (the nominal time, before jitter). */
const NOMINAL_SUFFIX = /-(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z)$/;

/**
 * The slot this execution belongs to. Schedules stamp TemporalScheduledStartTime; cronledger's own backfill starts
 * workflows under the schedule's exact ID, so the ID suffix says the same. A start with neither falls back to the
 * workflow's start time, which is recorded in history and so deterministic.
 */
export function scheduledTimeOf(info: WorkflowInfo): Date {
  const stamped = info.searchAttributes?.TemporalScheduledStartTime?.[0];
  if (stamped) return new Date(stamped as string | Date);
  const fromId = NOMINAL_SUFFIX.exec(info.workflowId)?.[1];
  if (fromId) return new Date(fromId);
  return info.runStartTime;
}

/** `cron:<taskId>:<YYYY-MM-DDTHH:MMZ>`: the slot's claim key, anchored to the scheduled minute in UTC. */
export function slotKey(taskId: string, scheduledAt: Date): string {
  return `cron:${taskId}:${scheduledAt.toISOString().slice(0, 16)}Z`;
}

/** `...-manual-2026-11-02T09:13:27Z`: the suffix of a manual trigger's workflow ID (`cron-<taskId>-manual-<start>`). */
const MANUAL_SUFFIX = /-manual-(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z)$/;

/**
 * When a manual run was triggered, to the second: the ID's suffix, else the execution's start time (recorded in
 * history, so deterministic).
 */
export function manualTimeOf(info: WorkflowInfo): Date {
  const fromId = MANUAL_SUFFIX.exec(info.workflowId)?.[1];
  return fromId ? new Date(fromId) : new Date(Math.floor(info.runStartTime.getTime() / 1000) * 1000);
}

/** `manual:<taskId>:<YYYY-MM-DDTHH:MM:SSZ>`: a manual trigger's own key space, which never meets a slot's key. */
export function manualKey(taskId: string, triggeredAt: Date): string {
  return `manual:${taskId}:${triggeredAt.toISOString().slice(0, 19)}Z`;
}
