/**
 * One result shared by every request of the admin process for a short while: the missed-slot check costs Temporal
 * calls per task, and pages, the JSON API and Prometheus scrapes all want it. A request within `maxAgeMs` of the last
 * successful computation gets that result; a request while a computation is in flight awaits it instead of starting
 * another (single flight). A failure is handed to the requests that awaited it and then forgotten, so the next request
 * tries again rather than seeing the error for the whole window.
 */

export interface Computed<T> {
  value: T;
  /** When the computation that produced it started: the figures describe the world at this moment. */
  computedAt: Date;
}

/** A computation that had not finished within the wait: it goes on, and `last` is the previous result, if any. */
export interface StillComputing<T> {
  pending: true;
  last?: Computed<T>;
}

/** The freshest result `within` gave: the computation it waited for, else the last one, else none yet. */
export const freshestOf = <T>(r: Computed<T> | StillComputing<T>): Computed<T> | undefined => ('pending' in r ? r.last : r);

export interface SharedResult<T> {
  get(): Promise<Computed<T>>;
  /** get(), waiting at most `waitMs` for a computation in flight: a page is never held longer by a slow source. */
  within(waitMs: number): Promise<Computed<T> | StillComputing<T>>;
}

export function sharedResult<T>(
  compute: (startedAt: Date) => Promise<T>,
  opts: { maxAgeMs: number; clock?: () => number },
): SharedResult<T> {
  const clock = opts.clock ?? Date.now;
  let last: Computed<T> | undefined;
  let inFlight: Promise<Computed<T>> | undefined;
  const shared: SharedResult<T> = {
    async within(waitMs: number): Promise<Computed<T> | StillComputing<T>> {
      let timer: NodeJS.Timeout | undefined;
      const waited = new Promise<StillComputing<T>>((resolve) => {
        timer = setTimeout(() => resolve({ pending: true, ...(last ? { last } : {}) }), waitMs);
      });
      try {
        return await Promise.race([shared.get(), waited]);
      } finally {
        clearTimeout(timer);
      }
    },
    get(): Promise<Computed<T>> {
      if (last && clock() - last.computedAt.getTime() < opts.maxAgeMs) return Promise.resolve(last);
      if (inFlight) return inFlight;
      const computedAt = new Date(clock());
      const flight = (async () => ({ value: await compute(computedAt), computedAt }))();
      inFlight = flight;
      flight.then(
        (done) => {
          last = done;
          inFlight = undefined;
        },
        () => {
          inFlight = undefined;
        },
      );
      return flight;
    },
  };
  return shared;
}
