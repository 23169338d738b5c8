// Paged and retried reads of the Temporal workflow service that more than one layer needs: a schedule's matching times
// (missed slots, backfill, the budget sweeper's count of slots a pause skipped), with the Timestamp conversions.
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

/**
 * A read-only Temporal call tried up to 3 times when the server answers DEADLINE_EXCEEDED (gRPC code 4). A schedule's
 * describe and its matching times are queries the frontend sends to the scheduler workflow, answered by the server's
 * internal worker; while a burst of schedules fires, that worker answers late and the frontend gives up with this code,
 * which the client's own retry policy does not retry. Anything else, or a third deadline, is thrown.
 */
export async function retryDeadlineExceeded<T>(call: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (e) {
      if (attempt >= 3 || !isDeadlineExceeded(e)) throw e;
      await new Promise((r) => setTimeout(r, 200 * attempt));
    }
  }
}

/** The gRPC code on the error, or on its cause: the schedule client wraps service errors. */
function isDeadlineExceeded(e: unknown): boolean {
  for (
    let err = e as { code?: unknown; cause?: unknown } | undefined, depth = 0;
    err && depth < 4;
    err = err.cause as typeof err, depth++
  ) {
    if (err.code === 4) return true;
  }
  return false;
}

/**
 * Every matching time in [from, to] (jittered, for a schedule with jitter: when it fires). A read, unlike slotTimes on a
 * jittered schedule. The server returns at most 1,000 per call and says nothing when it stops there,
 * so this pages: each call starts after the last time the previous one returned, until a call returns nothing.
 */
export async function matchingTimes(client: Client, scheduleId: string, from: Date, to: Date): Promise<Date[]> {
  const times: Date[] = [];
  // the server's start bound is exclusive: start 1 ms early so a slot exactly at `from` counts
  let after = new Date(from.getTime() - 1);
  for (;;) {
    const request = {
      namespace: client.options.namespace,
      scheduleId,
      startTime: timestampFromDate(after),
      endTime: timestampFromDate(to),
    };
    const res = await retryDeadlineExceeded(() => client.workflowService.listScheduleMatchingTimes(request));
    const page = (res.startTime ?? []).map(dateFromTimestamp).filter((d) => d > after && d <= to);
    if (page.length === 0) return times;
    times.push(...page);
    after = page[page.length - 1];
  }
}
