import type { Client } from '@temporalio/client';
import Long from 'long';

/** google.protobuf.Timestamp as the workflow service takes and returns it. */
export type Timestamp = NonNullable<Parameters<Client['workflowService']['listScheduleMatchingTimes']>[0]['startTime']>;

/**
 * Date <-> google.protobuf.Timestamp, for the raw workflow service calls (the SDK's own helpers are internal).
 * A Date holds milliseconds, which is all a slot time needs.
 */
export function timestampFromDate(date: Date): Timestamp {
  const ms = date.getTime();
  const seconds = Math.floor(ms / 1000);
  return { seconds: Long.fromNumber(seconds), nanos: (ms - seconds * 1000) * 1_000_000 };
}

export function dateFromTimestamp(ts: Timestamp): Date {
  const seconds = ts.seconds ?? Long.ZERO;
  const wholeSeconds = typeof seconds === 'number' ? seconds : Long.fromValue(seconds).toNumber();
  return new Date(wholeSeconds * 1000 + Math.floor((ts.nanos ?? 0) / 1_000_000));
}
