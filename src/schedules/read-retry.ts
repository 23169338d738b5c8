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
