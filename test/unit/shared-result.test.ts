import { describe, expect, it } from 'vitest';
import { sharedResult } from '../../src/admin/shared-result';
import { mapWithConcurrency } from '../../src/schedules/bounded-concurrency';

/** The sharing rule on a plain function, with a clock the test moves: no Temporal, no waiting. */
describe('one shared result', { timeout: 10_000 }, () => {
  const deferred = <T>() => {
    let resolve!: (v: T) => void;
    let reject!: (e: Error) => void;
    const promise = new Promise<T>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    return { promise, resolve, reject };
  };
  /** A shared result (window 30 s, on `clock`) whose every computation is a deferred the test settles, in `pending`. */
  const computations = (clock: () => number) => {
    const pending: ReturnType<typeof deferred<string>>[] = [];
    const shared = sharedResult(
      () => {
        pending.push(deferred<string>());
        return pending[pending.length - 1].promise;
      },
      { maxAgeMs: 30_000, clock },
    );
    return { pending, shared };
  };

  it('shares one computation among requests in flight and within the window, and recomputes after it', async () => {
    let now = 1_000_000;
    const { pending, shared } = computations(() => now);
    const waiting = [shared.get(), shared.get(), shared.get()];
    expect(pending).toHaveLength(1); // the later two await the first
    pending[0].resolve('first');
    for (const r of await Promise.all(waiting)) expect(r).toEqual({ value: 'first', computedAt: new Date(1_000_000) });
    now += 29_999;
    expect((await shared.get()).value).toBe('first');
    expect(pending).toHaveLength(1);
    now += 1;
    const later = shared.get();
    expect(pending).toHaveLength(2);
    pending[1].resolve('second');
    expect(await later).toEqual({ value: 'second', computedAt: new Date(1_030_000) });
  });

  it('hands a failure to those who awaited it and tries again on the next request', async () => {
    const { pending, shared } = computations(() => 0);
    const waiting = [shared.get(), shared.get()];
    pending[0].reject(new Error('frontend unavailable'));
    for (const w of waiting) await expect(w).rejects.toThrow('frontend unavailable');
    const retry = shared.get();
    expect(pending).toHaveLength(2);
    pending[1].resolve('ok');
    expect((await retry).value).toBe('ok');
  });

  it('within a wait: a computation still running gives the last result (or none) and goes on, joined by the next request', async () => {
    let now = 0;
    const { pending, shared } = computations(() => now);
    expect(await shared.within(5)).toEqual({ pending: true }); // nothing computed yet, and the first still running
    expect(await shared.within(5)).toEqual({ pending: true });
    expect(pending).toHaveLength(1); // the second request joined it
    pending[0].resolve('first');
    const first = { value: 'first', computedAt: new Date(0) };
    expect(await shared.within(5)).toEqual(first);
    now = 30_000;
    expect(await shared.within(5)).toEqual({ pending: true, last: first }); // a recomputation running: the last result
    expect(pending).toHaveLength(2);
    pending[1].reject(new Error('frontend unavailable'));
    await expect(shared.within(5)).rejects.toThrow('frontend unavailable'); // a failure is still a failure
    const third = shared.within(5_000);
    pending[2].resolve('third');
    expect(await third).toEqual({ value: 'third', computedAt: new Date(30_000) });
  });

  it('keeps at most the limit in flight and the results in order', async () => {
    let inFlight = 0;
    let most = 0;
    const results = await mapWithConcurrency(
      Array.from({ length: 50 }, (_, i) => i),
      16,
      async (i) => {
        most = Math.max(most, ++inFlight);
        await new Promise((r) => setImmediate(r));
        inFlight--;
        return i * 2;
      },
    );
    expect(most).toBe(16);
    expect(results).toEqual(Array.from({ length: 50 }, (_, i) => i * 2));
  });
});
