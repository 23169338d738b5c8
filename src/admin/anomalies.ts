/**
 * Cost-per-run anomalies: a user or task whose cost per run on a day is above the median of its trailing 7 days by
 * more than a factor. Everything is exact: cost in 10^-18 USD as BigInt, ratios compared by cross-multiplying, the
 * factor parsed from its decimal text. Cost per run often rises days before anything fails (a longer prompt, a
 * ballooning tool reply), so the day a streak of flagged days started is what the page shows.
 */
import type { CostPerRunDay } from '../reports/rollups-read';

export interface DailyPoint {
  day: string;
  costAtto: bigint;
  runs: bigint;
}

export interface Anomaly {
  kind: 'user' | 'task';
  id: string;
  /** The first day of the flagged streak. */
  startedOn: string;
  /** The last flagged day of the streak. */
  lastOn: string;
  days: number;
  /** On the first day: its cost per run and the trailing median it exceeded, exact decimal strings (USD). */
  costPerRunUsd: string;
  trailingMedianUsd: string;
}

/** Days of history (with runs) a median needs before anything is flagged: one odd day is no baseline. */
const MIN_HISTORY_DAYS = 3;

/** A rational number num/den with den > 0. */
interface Ratio {
  num: bigint;
  den: bigint;
}

const less = (a: Ratio, b: Ratio) => a.num * b.den < b.num * a.den;

export function parseFactor(text: string): Ratio {
  const m = /^(\d+)(?:\.(\d{1,18}))?$/.exec(text.trim());
  if (!m) throw new Error(`anomaly factor ${JSON.stringify(text)} is not a positive decimal such as 1.5`);
  const frac = m[2] ?? '';
  return { num: BigInt(m[1] + frac), den: 10n ** BigInt(frac.length) };
}

const compare = (a: Ratio, b: Ratio) => (less(a, b) ? -1 : less(b, a) ? 1 : 0);

/** The median of ratios given in ascending order. */
function medianOfSorted(sorted: Ratio[]): Ratio {
  const mid = Math.floor(sorted.length / 2);
  if (sorted.length % 2 === 1) return sorted[mid];
  const [a, b] = [sorted[mid - 1], sorted[mid]];
  return { num: a.num * b.den + b.num * a.den, den: 2n * a.den * b.den };
}

/** atto-USD ratio as a decimal string at 18 places, truncated toward zero (display only; comparisons are exact). */
function usd(r: Ratio): string {
  const atto = r.num / r.den;
  const digits = atto.toString().padStart(19, '0');
  return `${digits.slice(0, -18)}.${digits.slice(-18)}`;
}

/**
 * Flags days on or after `firstDay` (the series may start earlier, to give the first days a history). A day with no
 * run has no cost per run and neither flags nor breaks a streak.
 */
export function findAnomalies(kind: Anomaly['kind'], id: string, series: DailyPoint[], factorText: string, firstDay: string): Anomaly[] {
  const factor = parseFactor(factorText);
  const found: Anomaly[] = [];
  let open: Anomaly | undefined;
  // Each day's cost per run, ranked once among the series' days: a window's median is then found by sorting the
  // ranks (small integers) instead of comparing the ratios again (BigInt products) for every day's window.
  // The ranking compares each day's whole atto-USD per run first (one BigInt division a day) and cross-multiplies only
  // the days whose whole parts are equal: the same order as comparing the ratios, without a product per comparison.
  const ratios = series.map((p): Ratio | undefined => (p.runs === 0n ? undefined : { num: p.costAtto, den: p.runs }));
  const whole = ratios.map((r) => (r ? r.num / r.den : 0n));
  const rank: number[] = [];
  ratios
    .flatMap((r, i) => (r ? [i] : []))
    .sort((a, b) => (whole[a] < whole[b] ? -1 : whole[a] > whole[b] ? 1 : compare(ratios[a]!, ratios[b]!)))
    .forEach((day, position) => (rank[day] = position));
  for (const [i, point] of series.entries()) {
    const today = ratios[i];
    if (!today) continue;
    let flagged = false;
    let baseline: Ratio | undefined;
    if (point.day >= firstDay) {
      const history: number[] = [];
      for (let j = Math.max(0, i - 7); j < i; j++) if (ratios[j]) history.push(j);
      if (history.length >= MIN_HISTORY_DAYS) {
        baseline = medianOfSorted(history.sort((a, b) => rank[a] - rank[b]).map((j) => ratios[j]!));
        // today > factor × baseline, cross-multiplied: no division, no rounding
        flagged = today.num * factor.den * baseline.den > factor.num * baseline.num * today.den;
      }
    }
    if (flagged && baseline) {
      if (open) {
        open.lastOn = point.day;
        open.days++;
      } else {
        open = { kind, id, startedOn: point.day, lastOn: point.day, days: 1, costPerRunUsd: usd(today), trailingMedianUsd: usd(baseline) };
        found.push(open);
      }
    } else open = undefined;
  }
  return found;
}

const KIND_ORDER: Record<Anomaly['kind'], number> = { user: 0, task: 1 };
const byText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * The streaks of flagged days of one month, as findAnomalies gives them over every user's then every task's series
 * (ids in order): a flagged day goes on its key's streak when the key's previous day with runs was flagged too (a day
 * with no run neither flags nor breaks a streak, so it is no row); otherwise it starts one.
 */
export function anomaliesOfFlaggedDays(days: CostPerRunDay[]): Anomaly[] {
  const sorted = [...days].sort((a, b) => KIND_ORDER[a.kind] - KIND_ORDER[b.kind] || byText(a.id, b.id) || byText(a.day, b.day));
  const found: Anomaly[] = [];
  let open: Anomaly | undefined;
  for (const d of sorted) {
    if (open && open.kind === d.kind && open.id === d.id && open.lastOn === d.previousDay) {
      open.lastOn = d.day;
      open.days++;
      continue;
    }
    const today = { num: d.costAtto, den: d.runs };
    open = {
      kind: d.kind,
      id: d.id,
      startedOn: d.day,
      lastOn: d.day,
      days: 1,
      costPerRunUsd: usd(today),
      trailingMedianUsd: usd(d.median),
    };
    found.push(open);
  }
  return found;
}
