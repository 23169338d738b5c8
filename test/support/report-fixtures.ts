import type pg from 'pg';
import { recordUsage } from '../../src/ledger/record-usage';
import { fullUsage } from '../../src/models/provider';

/**
 * A month of ledger rows for the report tests, from a seeded generator (the same rows every run): several users and
 * both models, calls near midnight so UTC and Europe/Berlin days differ, failed calls, an adjustment, a
 * reconciliation delta and a credit (back-dated into the month, as corrections for a closed month would be), runs
 * that completed or failed, and a duplicate-skipped run. Token counts are picked so costs carry digits far below
 * the displayed 6 decimals: only an exact sum gets the totals right.
 */
export interface SeedOptions {
  month: string; // YYYY-MM
  users?: number;
  callsPerUser?: number;
  seed?: number;
  /** Prefix for run IDs and keys, so one database can hold several seeded months. */
  prefix?: string;
  /** The last day of the month with calls (default the month's last day): a month seeded as it stands on a day. */
  lastDay?: number;
  /** Book each call with its run's workflow ID, as the worker does, so a task's completed runs have costs (the forecast's). */
  workflowIds?: boolean;
}

export interface SeedResult {
  usageEntries: number;
  completedRuns: number;
  failedRuns: number;
  duplicates: number;
}

function rng(seed: number) {
  let s = seed >>> 0;
  return (n: number): number => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s % n;
  };
}

const pad = (n: number) => String(n).padStart(2, '0');

export async function seedMonth(pool: pg.Pool, opts: SeedOptions): Promise<SeedResult> {
  const next = rng(opts.seed ?? 42);
  const users = opts.users ?? 5;
  const perUser = opts.callsPerUser ?? 12;
  const prefix = opts.prefix ?? `seed-${opts.month}`;
  const [year, month] = opts.month.split('-').map(Number);
  const lastDay = opts.lastDay ?? new Date(Date.UTC(year, month, 0)).getUTCDate();
  let usageEntries = 0;
  let completedRuns = 0;
  let failedRuns = 0;
  const firstEntryIds: string[] = [];

  for (let u = 1; u <= users; u++) {
    const userId = `user-${pad(u)}`;
    for (let c = 0; c < perUser; c++) {
      // Day 1 00:30 UTC and the last day 23:30 UTC are in different months in Berlin; the rest spread over the month
      // (through lastDay when given).
      const day = c === 0 ? 1 : c === 1 ? lastDay : 1 + next(lastDay);
      const hour = c === 0 ? 0 : c === 1 ? 23 : next(24);
      const at = new Date(`${opts.month}-${pad(day)}T${pad(hour)}:${pad(c === 0 || c === 1 ? 30 : next(60))}:${pad(next(60))}Z`);
      const runId = `${prefix}-${userId}-${c}`;
      const failed = next(9) === 0;
      const promptTokens = 300 + next(4000);
      const chat = await recordUsage(pool, {
        runId,
        workflowId: opts.workflowIds ? runId : null,
        step: 'chat',
        attempt: 1,
        userId,
        taskId: `task-${u}`,
        model: 'openai/gpt-4o-mini',
        kind: 'chat',
        status: failed ? 'failed' : 'ok',
        usage: fullUsage({
          promptTokens,
          cachedPromptTokens: next(2) === 0 ? 0 : 1 + next(300),
          completionTokens: 1 + next(900),
        }),
        providerModel: 'gpt-4o-mini',
        providerRequestId: null,
        workerId: 'seed',
        occurredAt: at,
      });
      usageEntries++;
      if (c === 0) firstEntryIds.push(chat.id);
      if (!failed) {
        await recordUsage(pool, {
          runId,
          workflowId: opts.workflowIds ? runId : null,
          step: 'embed',
          attempt: 1,
          userId,
          taskId: `task-${u}`,
          model: 'openai/text-embedding-3-small',
          kind: 'embedding',
          status: 'ok',
          usage: fullUsage({ promptTokens: 1 + next(500), cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 }),
          providerModel: 'text-embedding-3-small',
          providerRequestId: null,
          workerId: 'seed',
          occurredAt: new Date(at.getTime() + 1000),
        });
        usageEntries++;
      }
      await pool.query(
        `insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, status, claimed_by, claimed_at, finished_at)
         values ($1, $2, $3, $4, $5, $6, $7, 'seed', $6, $6)`,
        [`cron:${runId}`, `task-${u}`, userId, runId, `${runId}-run`, at, failed ? 'failed' : 'completed'],
      );
      if (failed) failedRuns++;
      else completedRuns++;
    }
  }

  // Corrections, back-dated into the month: they are their own lines and count in the totals.
  const mid = `${opts.month}-15T12:00:00Z`;
  await pool.query(
    `insert into usage_ledger (idempotency_key, entry_type, original_entry_id, reason, user_id, run_id, task_id, model, kind, cost_usd, created_at)
     select $1, 'adjustment', id, 'provider invoice correction', user_id, run_id, task_id, model, kind, '0.000000123456789012', $3
       from usage_ledger where id = $2`,
    [`${prefix}-adjust`, firstEntryIds[0], mid],
  );
  await pool.query(
    `insert into usage_ledger (idempotency_key, entry_type, original_entry_id, reason, user_id, run_id, task_id, model, kind, cost_usd, created_at)
     select $1, 'reconciliation', id, 'monthly reconciliation delta', user_id, run_id, task_id, model, kind, '-0.000000000000000007', $3
       from usage_ledger where id = $2`,
    [`${prefix}-reconcile`, firstEntryIds[1 % firstEntryIds.length], mid],
  );
  await pool.query(
    `insert into usage_ledger (idempotency_key, entry_type, reason, user_id, cost_usd, created_at)
     values ($1, 'credit', 'goodwill credit', 'user-02', '-0.001000000000000001', $2)`,
    [`${prefix}-credit`, mid],
  );
  // One execution found its slot claimed and stopped.
  await pool.query(
    `insert into run_duplicates (temporal_run_id, workflow_id, idempotency_key, task_id, user_id, detected_by, detected_at)
     select temporal_run_id || '-dup', workflow_id, idempotency_key, task_id, user_id, 'seed', $2 from runs where workflow_id = $1`,
    [`${prefix}-user-01-2`, mid],
  );
  return { usageEntries, completedRuns, failedRuns, duplicates: 1 };
}

/** Exact ledger sums straight from SQL, grouped like a report cut, for the month in a zone: key -> cost string. */
export async function ledgerSums(
  pool: pg.Pool,
  zone: string,
  month: string,
  groupBy: 'user' | 'day' | 'model' | 'total',
): Promise<Map<string, string>> {
  const key = {
    user: `json_build_array(entry_type, user_id)::text`,
    day: `json_build_array(to_char(created_at at time zone $1, 'YYYY-MM-DD'), kind, entry_type)::text`,
    model: `json_build_array(model, kind, entry_type)::text`,
    total: `'total'`,
  }[groupBy];
  // The month's bounds are written out here, not taken from src/db/month-bounds.ts: the oracle stays independent.
  const { rows } = await pool.query<{ k: string; cost: string }>(
    `select ${key} as k, sum(cost_usd)::numeric(38, 18)::text as cost from usage_ledger
      where created_at >= (to_date($2 || '-01', 'YYYY-MM-DD')::timestamp at time zone $1)
        and created_at < ((to_date($2 || '-01', 'YYYY-MM-DD') + interval '1 month')::timestamp at time zone $1)
      group by 1`,
    [zone, month],
  );
  return new Map(rows.map((r) => [r.k, r.cost]));
}

/** Minimal RFC 4180 parser (quotes, doubled quotes, CRLF), so the test does not trust the writer's own reading. */
export function parseCsv(text: string): Record<string, string>[] {
  const records: string[][] = [];
  let field = '';
  let record: string[] = [];
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (quoted) {
      if (ch === '"' && text[i + 1] === '"') {
        field += '"';
        i++;
      } else if (ch === '"') quoted = false;
      else field += ch;
    } else if (ch === '"') quoted = true;
    else if (ch === ',') {
      record.push(field);
      field = '';
    } else if (ch === '\n' || ch === '\r') {
      if (ch === '\r' && text[i + 1] === '\n') i++;
      record.push(field);
      records.push(record);
      record = [];
      field = '';
    } else field += ch;
  }
  if (field !== '' || record.length > 0) records.push([...record, field]);
  const [header, ...rest] = records;
  return rest.map((r) => Object.fromEntries(header.map((h, i) => [h, r[i] ?? ''])));
}

/** An exact decimal string as BigInt units of 10^-18, independent of the code under test. */
export function atto(decimal: string): bigint {
  const m = /^(-)?(\d+)(?:\.(\d{0,18}))?$/.exec(decimal);
  if (!m) throw new Error(`not an exact decimal: ${decimal}`);
  const value = BigInt(m[2]) * 10n ** 18n + BigInt((m[3] ?? '').padEnd(18, '0') || '0');
  return m[1] ? -value : value;
}
