import { describe, expect, it } from 'vitest';
import { anomaliesOfFlaggedDays, findAnomalies, parseFactor, type Anomaly, type DailyPoint } from '../../src/admin/anomalies';
import type { CostPerRunDay } from '../../src/reports/rollups-read';

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

/** Each day of the series from firstDay on over the factor, with its median and the previous day with runs. */
function flaggedDays(kind: Anomaly['kind'], id: string, series: DailyPoint[], factorText: string, firstDay: string): CostPerRunDay[] {
  const flagged: CostPerRunDay[] = [];
  byDefinition(kind, id, series, factorText, firstDay, (i, median) => {
    const previous = series
      .slice(0, i)
      .reverse()
      .find((p) => p.runs > 0n);
    const p = series[i];
    flagged.push({ kind, id, day: p.day, costAtto: p.costAtto, runs: p.runs, median, previousDay: previous?.day ?? null });
  });
  return flagged;
}

function byDefinition(
  kind: Anomaly['kind'],
  id: string,
  series: DailyPoint[],
  factorText: string,
  firstDay: string,
  onFlagged?: (i: number, median: Ratio) => void,
): Anomaly[] {
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
      onFlagged?.(i, baseline);
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

describe('anomaliesOfFlaggedDays', () => {
  it('gives from the flagged days alone (the rollup refresh finds them) the streaks of the definition, users first', () => {
    const next = rng(34);
    const days = Array.from({ length: 37 }, (_, d) => `2026-${d < 7 ? '05' : '06'}-${String(d < 7 ? 25 + d : d - 6).padStart(2, '0')}`);
    const expected: Anomaly[] = [];
    const flagged: CostPerRunDay[] = [];
    for (const kind of ['user', 'task'] as const) {
      for (let s = 0; s < 300; s++) {
        const series: DailyPoint[] = days.map((day) => {
          const runs = next(4) === 0 ? 0n : BigInt(1 + next(3));
          return { day, costAtto: runs * 10n ** 15n * (next(3) === 0 ? BigInt(2 + next(3)) : 1n) + BigInt(next(1000)), runs };
        });
        const id = `${kind}-${String(s).padStart(3, '0')}`;
        expected.push(...byDefinition(kind, id, series, '1.5', '2026-06-01'));
        flagged.push(...flaggedDays(kind, id, series, '1.5', '2026-06-01'));
      }
    }
    // in any order, as SQL returns them
    for (let i = flagged.length - 1; i > 0; i--) {
      const j = next(i + 1);
      [flagged[i], flagged[j]] = [flagged[j], flagged[i]];
    }
    expect(anomaliesOfFlaggedDays(flagged)).toEqual(expected);
    expect(expected.filter((a) => a.days > 1).length).toBeGreaterThan(20);
  });
});
