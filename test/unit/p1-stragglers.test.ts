import { describe, expect, it } from 'vitest';
import { findStragglers, pairLines, type MachineSample, type PhaseFigures } from '../../bench/lib/p1-pairs';

/**
 * bench/fan-out.ts sets a P1 phase apart when one start came far after the others while the machine had room: issue
 * 23 saw a mock phase whose last start came 121.5 s after the slot with the machine a third idle, and that pair's
 * 0.58x said nothing about cronledger.
 */
const SLOT = 1_790_000_000_000;
/** 1,000 starts spread evenly over the first 30 s after the slot, plus `late` (ms after the slot). */
const startsWith = (...late: number[]) => [
  ...Array.from({ length: 1000 }, (_, i) => ({ workflowId: `run-${i}`, startTime: SLOT + i * 30 })),
  ...late.map((ms, i) => ({ workflowId: `late-${i}`, startTime: SLOT + ms })),
];
/** Machine samples every second from the slot for 200 s, each second `busy` of all cores busy. */
const machineAt = (busy: number): MachineSample[] =>
  Array.from({ length: 201 }, (_, i) => ({ at: SLOT + i * 1000, busy: Math.round(i * 200 * busy), total: i * 200 }));

describe('a straggler in a P1 phase', () => {
  it('is a start far beyond the 99th percentile while the machine had room', () => {
    const { p99StartMs, stragglers } = findStragglers(startsWith(121_500), SLOT, machineAt(0.66));
    expect(p99StartMs).toBeLessThanOrEqual(30_000);
    expect(stragglers).toEqual([{ workflowId: 'late-0', startMs: 121_500, machineBusy: expect.closeTo(0.66, 2) }]);
  });

  it('is not a late start while every core was busy: the machine, not a stall, held it back', () => {
    expect(findStragglers(startsWith(121_500), SLOT, machineAt(0.95)).stragglers).toEqual([]);
  });

  it('is not a start within twice the 99th percentile, nor one less than 15 s after it', () => {
    expect(findStragglers(startsWith(45_000), SLOT, machineAt(0.5)).stragglers).toEqual([]);
    const quick = Array.from({ length: 1000 }, (_, i) => ({ workflowId: `q-${i}`, startTime: SLOT + i * 5 })); // p99 about 5 s
    expect(findStragglers([...quick, { workflowId: 'q-late', startTime: SLOT + 15_000 }], SLOT, machineAt(0.5)).stragglers).toEqual([]);
    expect(findStragglers([...quick, { workflowId: 'q-late', startTime: SLOT + 25_000 }], SLOT, machineAt(0.5)).stragglers).toHaveLength(1);
  });
});

describe("P1's pairs", () => {
  const phase = (kind: 'bare' | 'mock' | 'floor', drainS: number, stragglers = 0, firstStartS = 0.5): PhaseFigures => ({
    phase: kind,
    runs: 1000,
    drainMs: drainS * 1000,
    medianMs: 0,
    firstStartMs: firstStartS * 1000,
    medianStartMs: 0,
    lastStartMs: 0,
    peakStartsPerSecond: 0,
    cpu: {},
    cpuMsPerRun: { workers: kind === 'bare' ? 43 : 62, Temporal: 66, PostgreSQL: kind === 'bare' ? 0 : 6 },
    fewestFreeSlots: {},
    workerThreadMsPerRun: {},
    requestsPerRun: {},
    serverPerRun: {},
    p99StartMs: 30_000,
    stragglers: Array.from({ length: stragglers }, () => ({ workflowId: 'late', startMs: 121_500, machineBusy: 0.66 })),
  });

  it('prints each ratio beside the CPU a run of each process, and leaves a pair with a straggler out of the median', () => {
    const lines = pairLines([
      phase('bare', 62),
      phase('mock', 80.5),
      phase('mock', 121.9, 1),
      phase('bare', 70.9),
      phase('bare', 50),
      phase('mock', 52),
    ]);
    expect(lines[2]).toBe(
      '  pair 1: bare 62.0 s, mock 80.5 s: 0.77x; cpu a run, bare: workers 43, Temporal 66, PostgreSQL 0 ms; mock: workers 62, Temporal 66, PostgreSQL 6 ms',
    );
    expect(lines[3]).toMatch(/^ {2}pair 2: bare 70\.9 s, mock 121\.9 s: 0\.58x SET APART, stragglers in mock 1;/);
    expect(lines.at(-1)).toBe('mock / bare throughput, median of 2 pairs without a straggler: 0.87x (1 set apart)');
  });

  it('sets apart a pair whose phase fired late: a first start 26.8 s after the slot makes its drain no measure of the run', () => {
    const lines = pairLines([phase('bare', 78, 0, 26.8), phase('mock', 53.8), phase('mock', 57.1), phase('bare', 56.7)]);
    expect(lines[2]).toMatch(/^ {2}pair 1: bare 78\.0 s, mock 53\.8 s: 1\.45x SET APART, bare first started 26\.8 s after the slot;/);
    expect(lines[3]).toMatch(/^ {2}pair 2: bare 56\.7 s, mock 57\.1 s: 0\.99x; /);
    expect(lines.at(-1)).toBe('mock / bare throughput, median of 1 pair without a straggler: 0.99x (1 set apart)');
  });

  it('pairs the floor phases with the bare ones the same way, apart from the mock pairs', () => {
    const results = [phase('bare', 50), phase('floor', 55), phase('mock', 60), phase('floor', 52), phase('bare', 52)];
    const floor = pairLines(results, 'floor');
    expect(floor[1]).toMatch(/^floor \/ bare throughput by pair \(the most mock \/ bare can reach\)/);
    expect(floor[2]).toMatch(/^ {2}pair 1: bare 50\.0 s, floor 55\.0 s: 0\.91x; /);
    expect(floor[3]).toMatch(/^ {2}pair 2: bare 52\.0 s, floor 52\.0 s: 1\.00x; /);
    expect(floor.at(-1)).toBe('floor / bare throughput, median of 2 pairs without a straggler: 0.95x');
    expect(pairLines(results).at(-1)).toBe('mock / bare throughput, median of 1 pair without a straggler: 0.83x');
  });
});
