import { readFileSync } from 'node:fs';

/** bench/fan-out.ts's phases (its header says what each runs). */
export const PHASES = ['bare', 'mock', 'openai', 'jitter', 'guarded', 'floor', 'bare-journal'] as const;
export type Phase = (typeof PHASES)[number];
/** The floor phase's table: one row a bookkeeping step, keyed by the workflow and the step (bench/lib/bare-worker.ts). */
export const FLOOR_TABLE = 'bench_floor_rows';

export interface PhaseFigures {
  phase: Phase;
  runs: number;
  /** Slot to the last run closed (ms). */
  drainMs: number;
  /** Slot to the median run closed (ms). */
  medianMs: number;
  /** Slot to the first run started (ms). */
  firstStartMs: number;
  /** Slot to the median and the last run started (ms): how long the schedules took to start them all. */
  medianStartMs: number;
  lastStartMs: number;
  peakStartsPerSecond: number;
  /** cronledger phases: claims (runs rows), completed claims, duplicates recorded, ledger rows. */
  claims?: { rows: number; completed: number; duplicates: number; ledgerRows: number; reservations: number; openReservations: number };
  /** The floor phase: its bookkeeping steps' rows (3 a run). */
  floorRows?: number;
  /** Share of one core each group used from the slot to the last close, and the whole machine's (of all cores). */
  cpu: Record<string, number>;
  /** CPU time per run (ms) of each process group from the slot to the last close: workers, Temporal, PostgreSQL. */
  cpuMsPerRun: Record<string, number>;
  /** The workers' CPU time per run (ms) by kind of thread: node's main thread, its other threads, the SDK core's. */
  workerThreadMsPerRun: Record<string, number>;
  /** The fewest free task slots any one worker had while the phase drained, by kind (0: that limit was reached). */
  fewestFreeSlots: Record<string, number>;
  /** What the workers asked of Temporal a run while the phase drained, by operation (polls included). */
  requestsPerRun: Record<string, number>;
  /**
   * What the server did inside a run, from its own metrics (bench/lib/temporal-metrics.ts): persistence requests by
   * operation, and how matching handed tasks to pollers. Empty when none of the server's processes serves metrics.
   */
  serverPerRun: Record<string, number>;
  /** Slot to the 99th percentile start (ms), and the stragglers: starts far beyond it while the machine had room. */
  p99StartMs: number;
  stragglers: Straggler[];
}

/**
 * A start that came far after the phase's others (beyond STRAGGLER_FACTOR times its 99th percentile start, and at
 * least STRAGGLER_MIN_GAP_MS after it) while the machine was not saturated in between (under MACHINE_SATURATED of all
 * cores busy): the schedule or the server stalled on that one run, and the phase's drain then says nothing about
 * cronledger's cost. Such a phase's pair is reported apart and left out of the median.
 */
export interface Straggler {
  workflowId: string;
  startMs: number;
  /** Share of all cores busy from the 99th percentile start to this one. */
  machineBusy: number;
}
/**
 * A phase whose first run started this long after the slot fired late: the schedules or the server stalled before
 * any of its work (a mock or bare phase's first start comes within 1 s otherwise), so its drain, counted from the
 * slot, says nothing about cronledger's cost either. Its pair is set apart like a straggler's.
 */
export const LATE_FIRST_START_MS = 10_000;
export const STRAGGLER_FACTOR = 2;
export const STRAGGLER_MIN_GAP_MS = 15_000;
export const MACHINE_SATURATED = 0.9;

/** The whole machine's busy and total clock ticks (all cores, every user) at a moment. */
export interface MachineSample {
  at: number;
  busy: number;
  total: number;
}

/** A machine sample now, from /proc/stat. */
export function machineSample(): MachineSample {
  const [cpu] = readFileSync('/proc/stat', 'utf8').split('\n');
  const fields = cpu.split(/\s+/).slice(1).map(Number);
  const total = fields.slice(0, 8).reduce((a, b) => a + b, 0);
  return { at: Date.now(), busy: total - fields[3] - fields[4], total };
}

/** Share of all cores busy from `from` to `to`, between the samples that enclose them (1 when there is no interval). */
export function machineBusyBetween(samples: MachineSample[], from: number, to: number): number {
  const first = samples.filter((s) => s.at <= from).at(-1) ?? samples[0];
  const last = samples.find((s) => s.at >= to) ?? samples.at(-1)!;
  return last.total > first.total ? (last.busy - first.busy) / (last.total - first.total) : 1;
}

/** A phase's 99th percentile start after the slot, and its stragglers, from its runs' start times (ms since the epoch). */
export function findStragglers(
  runs: { workflowId: string; startTime: number }[],
  slot: number,
  machine: MachineSample[],
): { p99StartMs: number; stragglers: Straggler[] } {
  const starts = runs.map((r) => r.startTime - slot).sort((a, b) => a - b);
  const p99StartMs = starts[Math.ceil(0.99 * starts.length) - 1];
  const lateAfter = Math.max(STRAGGLER_FACTOR * p99StartMs, p99StartMs + STRAGGLER_MIN_GAP_MS);
  const stragglers = runs
    .filter((r) => r.startTime - slot > lateAfter)
    .map((r) => ({
      workflowId: r.workflowId,
      startMs: r.startTime - slot,
      machineBusy: machineBusyBetween(machine, slot + p99StartMs, r.startTime),
    }))
    .filter((s) => s.machineBusy < MACHINE_SATURATED);
  return { p99StartMs, stragglers };
}

export const cpuText = (r: Pick<PhaseFigures, 'cpuMsPerRun'>): string =>
  `${Object.entries(r.cpuMsPerRun)
    .map(([k, v]) => `${k} ${v.toFixed(0)}`)
    .join(', ')} ms`;

/**
 * P1's throughput goal as pairs: the n-th bare phase against the n-th mock (`--only bare,mock,mock,bare,bare,mock`
 * gives each kind every position once), each pair's ratio beside the CPU a run of each process group in both phases,
 * then the median of the pairs without a straggler (one pair moves by 10 to 20 % from run to run on a shared machine).
 * A pair with a straggler, or with a phase that fired late, is printed, flagged, and left out of the median.
 * `kind` 'floor' pairs the floor phases with the bare ones the same way: the most mock/bare can reach.
 */
export function pairLines(results: PhaseFigures[], kind: 'mock' | 'floor' = 'mock'): string[] {
  const bares = results.filter((r) => r.phase === 'bare');
  const others = results.filter((r) => r.phase === kind);
  const count = Math.min(bares.length, others.length);
  if (count === 0) return [];
  const s = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;
  const what = kind === 'mock' ? '(goal >= 0.9)' : '(the most mock / bare can reach)';
  const lines = ['', `${kind} / bare throughput by pair ${what}, with the CPU a run of the workers, Temporal and PostgreSQL:`];
  const clean: number[] = [];
  for (let i = 0; i < count; i++) {
    const [b, o] = [bares[i], others[i]];
    const ratio = b.drainMs / o.drainMs;
    const late = [
      ...[b, o].filter((r) => r.stragglers.length > 0).map((r) => `stragglers in ${r.phase} ${r.stragglers.length}`),
      ...[b, o]
        .filter((r) => r.firstStartMs > LATE_FIRST_START_MS)
        .map((r) => `${r.phase} first started ${s(r.firstStartMs)} after the slot`),
    ];
    if (late.length === 0) clean.push(ratio);
    lines.push(
      `  pair ${i + 1}: bare ${s(b.drainMs)}, ${kind} ${s(o.drainMs)}: ${ratio.toFixed(2)}x` +
        `${late.length > 0 ? ` SET APART, ${late.join(' and ')}` : ''}; ` +
        `cpu a run, bare: ${cpuText(b)}; ${kind}: ${cpuText(o)}`,
    );
  }
  const sorted = clean.sort((a, b) => a - b);
  const n = sorted.length;
  const median = n === 0 ? NaN : n % 2 === 1 ? sorted[(n - 1) / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  lines.push(
    n === 0
      ? `${kind} / bare throughput: no pair without a straggler`
      : `${kind} / bare throughput, median of ${n} pair${n > 1 ? 's' : ''} without a straggler: ${median.toFixed(2)}x` +
          (count > n ? ` (${count - n} set apart)` : ''),
  );
  return lines;
}
