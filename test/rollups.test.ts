import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { recordUsage } from '../src/ledger/record-usage';
import { buildReport } from '../src/reports/build-report';
import { ensureMonthRollups, rebuildAll, rebuildMonth, refreshRollups } from '../src/reports/rollups-write';
import { seedMonth } from './support/report-fixtures';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { fullUsage } from '../src/models/provider';

let ctx: TestContext;
const MONTH = '2026-06';

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await seedMonth(ctx.ownerPool, { month: MONTH, users: 4, callsPerUser: 10 });
});

afterAll(async () => ctx?.close());

/** Every rollup row of a zone and month, in a fixed order, as text. */
async function snapshot(zone: string, month = MONTH): Promise<string[]> {
  const { rows } = await ctx.pool.query(
    `select day::text, user_id, task_id, model, kind, entry_type, status, entries, prompt_tokens, cached_prompt_tokens, completion_tokens,
            reasoning_tokens, cost_usd::text, first_entry_id, last_entry_id
       from usage_rollups
      where zone = $1 and to_char(day, 'YYYY-MM') = $2
      order by 1, 2, 3 nulls first, 4 nulls first, 5 nulls first, 6, 7`,
    [zone, month],
  );
  return rows.map((r) => JSON.stringify(r));
}

/** The same buckets computed straight from the raw ledger by an independent query. */
async function fromLedger(zone: string, month = MONTH): Promise<string[]> {
  const { rows } = await ctx.pool.query(
    `select (created_at at time zone $1)::date::text as day, user_id, task_id, model, kind, entry_type, status, count(*)::bigint as entries,
            sum(prompt_tokens)::bigint as prompt_tokens, sum(cached_prompt_tokens)::bigint as cached_prompt_tokens,
            sum(completion_tokens)::bigint as completion_tokens, sum(reasoning_tokens)::bigint as reasoning_tokens,
            sum(cost_usd)::text as cost_usd, min(id) as first_entry_id, max(id) as last_entry_id
       from usage_ledger
      where to_char(created_at at time zone $1, 'YYYY-MM') = $2
      group by 1, 2, 3, 4, 5, 6, 7
      order by 1, 2, 3 nulls first, 4 nulls first, 5 nulls first, 6, 7`,
    [zone, month],
  );
  return rows.map((r) => JSON.stringify(r));
}

const call = (key: string, occurredAt: Date, userId = 'user-01', status: 'ok' | 'failed' = 'ok', taskId: string | null = null) => ({
  runId: null,
  idempotencyKey: key,
  step: 'chat',
  attempt: 1,
  userId,
  taskId,
  model: 'openai/gpt-4o-mini',
  kind: 'chat' as const,
  status,
  usage: fullUsage({ promptTokens: 777, cachedPromptTokens: 11, completionTokens: 55, reasoningTokens: 5 }),
  providerModel: null,
  providerRequestId: null,
  workerId: 'test',
  occurredAt,
});

describe.each(['UTC', 'Europe/Berlin'])('rollups in %s', (zone) => {
  it('kept up incrementally, including late and late-committing entries, equal a rebuild from the raw ledger', async () => {
    await ensureMonthRollups(ctx.pool, zone, MONTH);
    expect(await snapshot(zone)).toEqual(await fromLedger(zone));
    const before = await snapshot(zone);
    // An instant and user whose chat bucket is rolled up already: late entries back-dated there reopen it.
    const { rows } = await ctx.pool.query<{ user_id: string; task_id: string; created_at: Date }>(
      `select user_id, task_id, created_at from usage_ledger
        where entry_type = 'usage' and kind = 'chat' and status = 'ok' and created_at between '2026-06-05' and '2026-06-25'
        order by id limit 1`,
    );
    const bucket = rows[0];
    // The slow writer books for another user, so the two never meet on a budget row of one user's month, whatever the
    // budget tables do: only the rollup queue is under test.
    const other = await ctx.pool.query<{ user_id: string; task_id: string; created_at: Date }>(
      `select user_id, task_id, created_at from usage_ledger
        where entry_type = 'usage' and kind = 'chat' and status = 'ok' and created_at between '2026-06-05' and '2026-06-25'
          and user_id not in ($1, 'user-03') order by id limit 1`,
      [bucket.user_id],
    );
    const slowBucket = other.rows[0];

    // A transaction takes its ledger id now but commits only after later entries were folded in.
    const slow = await ctx.ownerPool.connect();
    try {
      await slow.query('begin');
      await slow.query(
        `insert into usage_ledger (idempotency_key, entry_type, user_id, task_id, model, kind, status, attempt, prompt_tokens, completion_tokens,
                                   cost_usd, price_version, created_at)
         values ($1, 'usage', $2, $4, 'openai/gpt-4o-mini', 'chat', 'ok', 1, 1000, 10, '0.000156000000000000', 'v1', $3)`,
        [`slow-${zone}`, slowBucket.user_id, slowBucket.created_at, slowBucket.task_id],
      );

      // Entries that commit meanwhile: one now-ish, two back-dated into buckets rolled up already (one failed).
      await recordUsage(ctx.ownerPool, call(`late-a-${zone}`, bucket.created_at, bucket.user_id, 'ok', bucket.task_id));
      await recordUsage(ctx.ownerPool, call(`late-b-${zone}`, new Date('2026-06-20T23:59:59Z'), 'user-03', 'failed'));
      await recordUsage(ctx.ownerPool, call(`new-user-${zone}`, new Date('2026-06-28T12:00:00Z'), 'user-new'));
      const first = await refreshRollups(ctx.pool);
      expect(first.entries).toBe(3);
      expect(first.zones[zone].reopened).toBeGreaterThanOrEqual(1); // late-a landed in a bucket rolled up before: reopened
      expect(await snapshot(zone)).not.toEqual(before);

      await slow.query('commit');
    } finally {
      slow.release();
    }
    // The slow entry's id is below the watermark, yet it was queued with its commit and is folded in now.
    const second = await refreshRollups(ctx.pool);
    expect(second.entries).toBe(1);
    expect(second.zones[zone].reopened).toBe(1);
    expect(BigInt(second.watermarks[zone].lastEntryId)).toBeGreaterThan(0n);

    const incremental = await snapshot(zone);
    expect(incremental).toEqual(await fromLedger(zone));
    expect(incremental.some((r) => r.includes('"user-new"'))).toBe(true);

    const rebuilt = await rebuildMonth(ctx.pool, zone, MONTH);
    expect(rebuilt.buckets).toBe(incremental.length);
    expect(await snapshot(zone)).toEqual(incremental);
  });
});

describe('rebuild', () => {
  it('is deterministic, covers every month, and a report read afterwards is unchanged', async () => {
    const report = await buildReport(ctx.pool, { month: MONTH, timeZone: 'UTC' });
    const results = await rebuildAll(ctx.pool, 'UTC');
    expect(results.map((r) => r.month)).toContain(MONTH);
    const once = await snapshot('UTC');
    await rebuildAll(ctx.pool, 'UTC');
    expect(await snapshot('UTC')).toEqual(once);
    expect(await buildReport(ctx.pool, { month: MONTH, timeZone: 'UTC' })).toEqual(report);
  });

  it('runs from the CLI: `rollups rebuild --month` recomputes the same rows, and a bad month is refused', async () => {
    const before = await snapshot('UTC');
    const r = await runCli(['rollups', 'rebuild', '--month', MONTH, '--tz', 'UTC', '--json'], ctx.env);
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { rebuilt: { zone: string; month: string; buckets: number }[] };
    expect(out.rebuilt).toEqual([expect.objectContaining({ zone: 'UTC', month: MONTH, buckets: before.length })]);
    expect(await snapshot('UTC')).toEqual(before);

    const bad = await runCli(['rollups', 'rebuild', '--month', '2026-6'], ctx.env);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('--month "2026-6" is not a month: write it as YYYY-MM');
  });
});

/** One chat entry inserted by a writer whose transaction stays open. */
const insertOpen = (writer: pg.PoolClient, key: string, userId: string, at: string) =>
  writer.query(
    `insert into usage_ledger (idempotency_key, entry_type, user_id, model, kind, status, attempt, prompt_tokens, completion_tokens,
                               cost_usd, price_version, created_at)
     values ($1, 'usage', $2, 'openai/gpt-4o-mini', 'chat', 'ok', 1, 1000, 10, '0.000156000000000000', 'v1', $3)`,
    [key, userId, at],
  );

describe('the rollup queue', () => {
  it('holds one row per entry whatever the zones, and a writer locks no row that other writers share', async () => {
    for (const zone of ['UTC', 'Europe/Berlin', 'America/New_York']) await ensureMonthRollups(ctx.pool, zone, MONTH);
    expect((await ctx.pool.query('select zone from rollup_zones')).rowCount).toBeGreaterThanOrEqual(3);
    const writer = await ctx.ownerPool.connect();
    const other = await ctx.ownerPool.connect();
    try {
      await writer.query('begin');
      await insertOpen(writer, 'queue-writer', 'user-queue', '2026-06-11T03:00:00Z');
      const queued = await writer.query<{ n: string }>(
        'select count(*) as n from rollup_queue q join usage_ledger l on l.id = q.entry_id where l.idempotency_key = $1',
        ['queue-writer'],
      );
      expect(queued.rows[0].n).toBe('1');
      // The queue references no zone row, so an open writer locks none: a queue with a foreign key to rollup_zones would fail this.
      await other.query('begin');
      await expect(other.query('select zone from rollup_zones for update nowait')).resolves.toBeTruthy();
      await other.query('rollback');
      // A refresh meanwhile neither waits for the writer nor loses its entry.
      expect((await refreshRollups(ctx.pool)).entries).toBe(0);
      await writer.query('commit');
    } finally {
      writer.release();
      other.release();
    }
    const folded = await refreshRollups(ctx.pool);
    expect(folded.entries).toBe(1);
    expect(await ctx.pool.query('select 1 from rollup_queue')).toMatchObject({ rowCount: 0 });
    for (const zone of ['UTC', 'Europe/Berlin', 'America/New_York']) {
      expect((await snapshot(zone)).some((r) => r.includes('"user-queue"'))).toBe(true);
      expect(await snapshot(zone)).toEqual(await fromLedger(zone));
    }

    // A rebuild while entries wait in the queue: its snapshot holds them, and they are added to no bucket twice.
    await recordUsage(ctx.ownerPool, call('queued-during-rebuild', new Date('2026-06-12T08:00:00Z'), 'user-queue'));
    await rebuildMonth(ctx.pool, 'UTC', MONTH);
    await refreshRollups(ctx.pool);
    for (const zone of ['UTC', 'Europe/Berlin', 'America/New_York']) expect(await snapshot(zone)).toEqual(await fromLedger(zone));
  });
});

describe('a zone registered while a ledger writer is open', () => {
  it('is built without waiting for that writer, and its entry is folded in by the next refresh once it commits', async () => {
    const zone = 'Asia/Tokyo';
    const writer = await ctx.ownerPool.connect();
    try {
      await writer.query('begin');
      // Its trigger runs now, before Tokyo is tracked: the queue row names no zone, so Tokyo gets the entry all the same.
      await insertOpen(writer, 'open-writer', 'user-writer', '2026-06-10T03:00:00Z');
      expect((await ensureMonthRollups(ctx.pool, zone, MONTH)).built).toBe(true);
      expect((await snapshot(zone)).some((r) => r.includes('"user-writer"'))).toBe(false);
      await writer.query('commit');
    } finally {
      writer.release();
    }
    expect((await refreshRollups(ctx.pool)).entries).toBe(1);
    expect((await snapshot(zone)).some((r) => r.includes('"user-writer"'))).toBe(true);
    expect(await snapshot(zone)).toEqual(await fromLedger(zone));
    // The application role took no lock on the ledger for it: it may not (test/grants.test.ts).
    const { rows } = await ctx.pool.query<{ locks: boolean }>(
      `select has_table_privilege(current_user, 'usage_ledger', 'update') as locks`,
    );
    expect(rows[0].locks).toBe(false);
  });
});
