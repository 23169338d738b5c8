/**
 * Forecast error on a simulated month: users whose tasks run planned workloads (the mock's `simulate` token counts,
 * each run's reply and embedding varying around the plan), forecast on the month's first day exactly as
 * `cronledger forecast` does (slots left × the median and p95 of the last 30 runs, src/forecast/projection.ts), then
 * held against what the month's runs cost. Offline and deterministic (a seeded generator); money in atto-USD.
 *
 *   node --import tsx bench/forecast-error.ts [--users 200] [--seed 1]
 *
 * Scenarios: `steady` (the plan holds all month), `growth` (a third of the tasks double their prompt from the 16th,
 * which no forecast made on the 1st can know), `new` (tasks with 2 runs of history: forecast at the guard's worst case).
 * The schedules are fixed intervals laid out here (hourly, every 6 hours, daily), standing in for the Temporal
 * server's matching times, which the real forecast reads.
 */
import { atto, usdOf } from '../src/budgets/tier';
import { projectUser, type RunCost } from '../src/forecast/projection';
import { displayUsd } from '../src/money';
import { benchArgs, numberOption } from './lib/args';

const { values, command } = benchArgs('bench/forecast-error.ts', {
  users: { type: 'string', default: '200' },
  seed: { type: 'string', default: '1' },
});
const USERS = numberOption('users', values.users);
let state = numberOption('seed', values.seed) >>> 0 || 1;
/** xorshift32 in [0, 1): the same month for the same seed. */
const random = () => {
  state ^= state << 13;
  state ^= state >>> 17;
  state ^= state << 5;
  return (state >>> 0) / 2 ** 32;
};

// gpt-4o-mini and text-embedding-3-small, standard price table v1, in atto-USD per token
const PROMPT = 150_000_000_000n;
const COMPLETION = 600_000_000_000n;
const EMBEDDING = 20_000_000_000n;
const MAX_OUTPUT = 1024;

interface Plan {
  promptTokens: number;
  completionTokens: number;
}
/** One run of a planned workload: the reply (and the embedding of it) varies from half to one and a half of the plan. */
function runCost(plan: Plan): bigint {
  const completion = Math.min(MAX_OUTPUT, Math.round(plan.completionTokens * (0.5 + random())));
  return BigInt(plan.promptTokens) * PROMPT + BigInt(completion) * COMPLETION + BigInt(completion) * EMBEDDING;
}
const worstCase = (plan: Plan) => BigInt(plan.promptTokens) * PROMPT + BigInt(MAX_OUTPUT) * (COMPLETION + EMBEDDING);

/** Nearest rank, as percentile_disc: the cost of a real run. */
function percentile(sorted: bigint[], p: number): bigint {
  return sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)];
}

const MONTH_START = Date.UTC(2026, 10, 1); // November 2026, UTC: 30 days
const MONTH_END = Date.UTC(2026, 11, 1);
const HOUR = 3_600_000;
const INTERVALS = [HOUR, 6 * HOUR, 24 * HOUR];

function simulate(scenario: 'steady' | 'growth' | 'new') {
  const errors: number[] = [];
  let withinHigh = 0;
  let forecastTotal = 0n;
  let actualTotal = 0n;
  for (let u = 0; u < USERS; u++) {
    const tasks = Array.from({ length: 1 + Math.floor(random() * 3) }, () => {
      const every = INTERVALS[Math.floor(random() * INTERVALS.length)];
      const offset = Math.floor(random() * (every / 60_000)) * 60_000;
      const plan: Plan = { promptTokens: 200 + Math.floor(random() * 2000), completionTokens: 100 + Math.floor(random() * 600) };
      const slots: Date[] = [];
      for (let t = MONTH_START + offset; t < MONTH_END; t += every) slots.push(new Date(t));
      const history = Array.from({ length: scenario === 'new' ? 2 : 30 }, () => runCost(plan)).sort((a, b) => (a < b ? -1 : 1));
      const cost: RunCost =
        history.length < 5
          ? { basis: 'worst-case', runs: history.length, medianUsd: usdOf(worstCase(plan)), p95Usd: usdOf(worstCase(plan)) }
          : { basis: 'runs', runs: 30, medianUsd: usdOf(percentile(history, 0.5)), p95Usd: usdOf(percentile(history, 0.95)) };
      const grows = scenario === 'growth' && random() < 1 / 3;
      const actual = slots.reduce((sum, s) => {
        const later = grows && s.getTime() >= MONTH_START + 15 * 24 * HOUR;
        return sum + runCost(later ? { ...plan, promptTokens: plan.promptTokens * 2 } : plan);
      }, 0n);
      return { slots, cost, actual };
    });
    const p = projectUser({
      at: new Date(MONTH_START),
      timeZone: 'UTC',
      limitUsd: null,
      spentUsd: '0',
      reservedUsd: '0',
      bands: [],
      tasks: tasks.map((t) => ({ slots: t.slots, cost: t.cost })),
    });
    const actual = tasks.reduce((s, t) => s + t.actual, 0n);
    const median = atto(p.medianUsd);
    forecastTotal += median;
    actualTotal += actual;
    // a ratio for the figure only (never money): the error in tenths of a percent, from exact integers
    errors.push(Number(((median - actual) * 1000n) / actual) / 10);
    if (actual <= atto(p.highUsd)) withinHigh++;
  }
  const abs = errors.map(Math.abs).sort((a, b) => a - b);
  return {
    scenario,
    users: USERS,
    medianAbsErrorPct: abs[Math.floor(abs.length / 2)],
    p95AbsErrorPct: abs[Math.ceil(0.95 * abs.length) - 1],
    meanErrorPct: Math.round((errors.reduce((a, b) => a + b, 0) / errors.length) * 10) / 10,
    withinHighPct: Math.round((withinHigh * 1000) / USERS) / 10,
    forecastTotal: displayUsd(usdOf(forecastTotal)),
    actualTotal: displayUsd(usdOf(actualTotal)),
  };
}

const rows = (['steady', 'growth', 'new'] as const).map(simulate);
process.stdout.write(`${command}\n`);
process.stdout.write('scenario  users  |error| median  |error| p95  mean error  spend <= high  forecast (all users)  spent (all users)\n');
for (const r of rows) {
  process.stdout.write(
    `${r.scenario.padEnd(8)}  ${String(r.users).padStart(5)}  ${`${r.medianAbsErrorPct.toFixed(1)} %`.padStart(14)}  ${`${r.p95AbsErrorPct.toFixed(1)} %`.padStart(11)}  ` +
      `${`${r.meanErrorPct.toFixed(1)} %`.padStart(10)}  ${`${r.withinHighPct.toFixed(1)} %`.padStart(13)}  ${r.forecastTotal.padStart(20)}  ${r.actualTotal.padStart(17)}\n`,
  );
}
