import { describe, expect, it } from 'vitest';
import { findAnomalies, parseFactor, type Anomaly, type DailyPoint } from '../../src/admin/anomalies';

/**
 * findAnomalies ranks each series' days once and finds every window's median from the ranks. This checks it against
 * the definition, written out plainly: for each day, the trailing 7 days with runs, sorted by exact comparison, their
 * median, and today > factor × median; streaks of flagged days.
 */
type Ratio = { num: bigint; den: bigint };
const less = (a: Ratio, b: Ratio) => a.num * b.den < b.num * a.den;
const usd = (r: Ratio) => {
  const digits = (r.num / r.den).toString().padStart(19, '0');
  return `${digits.slice(0, -18)}.${digits.slice(-18)}`;
};

function byDefinition(kind: Anomaly['kind'], id: string, series: DailyPoint[], factorText: string, firstDay: string): Anomaly[] {
  const factor = parseFactor(factorText);
  const found: Anomaly[] = [];
  let open: Anomaly | undefined;
  series.forEach((point, i) => {
    if (point.runs === 0n) return;
    const today = { num: point.costAtto, den: point.runs };
    const history = series
      .slice(Math.max(0, i - 7), i)
      .filter((p) => p.runs > 0n)
      .map((p) => ({ num: p.costAtto, den: p.runs }))
      .sort((a, b) => (less(a, b) ? -1 : less(b, a) ? 1 : 0));
    let baseline: Ratio | undefined;
    if (point.day >= firstDay && history.length >= 3) {
      const mid = Math.floor(history.length / 2);
      const [a, b] = [history[mid - 1], history[mid]];
      baseline = history.length % 2 === 1 ? history[mid] : { num: a.num * b.den + b.num * a.den, den: 2n * a.den * b.den };
    }
    if (baseline && today.num * factor.den * baseline.den > factor.num * baseline.num * today.den) {
      if (open) {
        open.lastOn = point.day;
        open.days++;
      } else {
        open = { kind, id, startedOn: point.day, lastOn: point.day, days: 1, costPerRunUsd: usd(today), trailingMedianUsd: usd(baseline) };
        found.push(open);
      }
    } else open = undefined;
  });
  return found;
}

/** A seeded generator (the same series every run). */
function rng(seed: number) {
  let s = seed >>> 0;
  return (n: number) => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s % n;
  };
}

describe('findAnomalies', () => {
  it('flags the same streaks as the definition, on 2,000 seeded series with idle days, ties, spikes and drifts', () => {
    const next = rng(12);
    const days = Array.from({ length: 37 }, (_, d) => `2026-${d < 7 ? '05' : '06'}-${String(d < 7 ? 25 + d : d - 6).padStart(2, '0')}`);
    let flagged = 0;
    for (let s = 0; s < 2000; s++) {
      const base = BigInt(1 + next(5)) * 10n ** BigInt(12 + next(5));
      const series: DailyPoint[] = days.map((day) => {
        const runs = next(6) === 0 ? 0n : BigInt(1 + next(4));
        // a few cost levels (ties), now and then a spike or a slow drift upwards
        const level = next(10) === 0 ? BigInt(2 + next(4)) : 1n;
        const cost = runs * base * level + BigInt(next(3)) * base;
        return { day, costAtto: cost, runs };
      });
      const factor = ['1.5', '1', '2.25', '1.000000000000000001'][s % 4];
      const expected = byDefinition('user', `u${s}`, series, factor, '2026-06-01');
      expect(findAnomalies('user', `u${s}`, series, factor, '2026-06-01')).toEqual(expected);
      flagged += expected.length;
    }
    expect(flagged).toBeGreaterThan(100); // the series do flag: the comparison is not of two empty lists
  });
});
