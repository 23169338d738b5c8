import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { applyBudgets } from '../src/budgets/budgets-store';
import { APP_ROLE, OWNER_ROLE, READONLY_ROLE } from '../src/db/roles';
import { creditUser } from '../src/ledger/entries';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { recordUsage } from '../src/ledger/record-usage';
import { runCli } from './support/cli';
import { chatBooking } from './support/bookings';
import { createTestContext, type TestContext } from './support/context';

/**
 * Who may write what: the application role (what workers, the CLI and reports connect as) may append to the ledger
 * and the prices and read them, and nothing more. Each refusal must come from PostgreSQL's privileges (SQLSTATE
 * 42501), not from the append-only triggers, which stay as a second guard.
 */

let ctx: TestContext;
let owner: pg.Client;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.pool, loadPricesFile('prices/standard.json'), 'test');
  await recordUsage(ctx.ownerPool, chatBooking('grants-1', 'u1', new Date('2026-06-01T00:00:00Z')));
  owner = new pg.Client({ connectionString: ctx.ownerDatabaseUrl });
  await owner.connect();
});

afterAll(async () => {
  await owner?.end();
  await ctx?.close();
});

/** What must stay exactly as it is: every row of the ledger and the prices, and whether their triggers are enabled. */
async function guarded(): Promise<string> {
  const { rows } = await owner.query(
    `select (select coalesce(json_agg(l order by l.id), '[]') from usage_ledger l)::text as ledger,
            (select coalesce(json_agg(p order by p.id), '[]') from model_prices p)::text as prices,
            (select json_agg(json_build_object(t.tgname, t.tgenabled) order by t.tgname)
               from pg_trigger t where t.tgrelid in ('usage_ledger'::regclass, 'model_prices'::regclass) and not t.tgisinternal)::text as triggers`,
  );
  return JSON.stringify(rows[0]);
}

const forbidden = (table: string) => [
  `update ${table} set created_at = now()`,
  `delete from ${table}`,
  `truncate ${table}`,
  `truncate ${table} cascade`,
  `alter table ${table} disable trigger all`,
  `alter table ${table} disable trigger user`,
  `alter table ${table} add column sneaky integer`,
  `alter table ${table} owner to ${APP_ROLE}`,
  `drop table ${table}`,
  `drop table ${table} cascade`,
  `lock table ${table} in share mode`,
  `create trigger sneaky before insert on ${table} for each row execute function forbid_append_only_change()`,
];

describe('the application role', () => {
  it.each([
    ...forbidden('usage_ledger'),
    ...forbidden('model_prices'),
    `alter table usage_ledger disable trigger usage_ledger_append_only`,
    `alter table model_prices disable trigger model_prices_no_truncate`,
    `set session_replication_role = replica`,
    `set local session_replication_role = replica`,
    `select set_config('session_replication_role', 'replica', false)`,
    `select setval('usage_ledger_id_seq', 1)`,
    `create table sneaky (id int)`,
    `create schema sneaky`,
    `alter role ${APP_ROLE} superuser`,
  ])('is refused by privilege: %s', async (sql) => {
    const before = await guarded();
    const client = await ctx.pool.connect();
    try {
      await client.query('begin');
      const err = await client.query(sql).then(
        () => undefined,
        (e: { code?: string; message: string }) => e,
      );
      await client.query('rollback');
      expect(err, `${sql} succeeded as ${APP_ROLE}`).toBeDefined();
      expect({ code: err?.code, message: err?.message }).toMatchObject({ code: '42501' });
    } finally {
      client.release();
    }
    expect(await guarded()).toBe(before);
  });

  it('appends to the ledger and reads it (what it is for)', async () => {
    const { rows } = await ctx.pool.query<{ n: string }>('select count(*) as n from usage_ledger');
    expect(Number(rows[0].n)).toBeGreaterThan(0);
  });

  it('is an ordinary login role: not superuser, cannot create roles or databases, bypass RLS or act as the owner', async () => {
    const { rows } = await owner.query(
      `select rolsuper, rolcreaterole, rolcreatedb, rolbypassrls, rolreplication,
              pg_has_role($1, table_owner, 'usage') as acts_as_owner,
              has_database_privilege($1, current_database(), 'create') as creates_schemas,
              has_schema_privilege($1, 'public', 'create') as creates_tables
         from pg_roles, (select pg_get_userbyid(relowner) as table_owner from pg_class where oid = 'usage_ledger'::regclass) o
        where rolname = $1`,
      [APP_ROLE],
    );
    expect(rows[0]).toEqual({
      rolsuper: false,
      rolcreaterole: false,
      rolcreatedb: false,
      rolbypassrls: false,
      rolreplication: false,
      acts_as_owner: false,
      creates_schemas: false,
      creates_tables: false,
    });
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Every table, against an allow-list
// ---------------------------------------------------------------------------------------------------------------

const PRIVILEGES = ['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER'] as const;

/**
 * The application role's privileges, table by table. A migration that adds a table adds it here with the least it
 * needs (and grants exactly that); a table missing here fails the test, whatever it was granted.
 */
const ALLOWED: Record<string, string[]> = {
  usage_ledger: ['SELECT', 'INSERT'],
  model_prices: ['SELECT', 'INSERT'],
  model_price_rates: ['SELECT', 'INSERT'], // 029: a version's rates for other tiers and long context, appended with it
  runs: ['SELECT', 'INSERT', 'UPDATE'],
  run_duplicates: ['SELECT', 'INSERT'],
  memories: ['SELECT', 'INSERT'],
  call_embeddings: ['SELECT', 'INSERT'], // 023: an embedding call's vector, until the run's completion copies it
  task_versions: ['SELECT', 'INSERT'], // 026: every applied version of every task, append-only; what runs load
  report_deliveries: ['SELECT', 'INSERT'],
  rollup_zones: ['SELECT', 'INSERT', 'UPDATE'],
  rollup_months: ['SELECT', 'INSERT', 'UPDATE'],
  rollup_queue: ['SELECT', 'INSERT', 'DELETE'], // one row per queued entry, for every zone
  run_rollups: ['SELECT', 'INSERT', 'DELETE'], // claimed runs per zone, day, user, task, status, tier
  run_rollup_queue: ['SELECT', 'INSERT', 'DELETE'], // run changes waiting to be folded in
  usage_rollups: ['SELECT', 'INSERT', 'DELETE'],
  usage_month_rollups: ['SELECT', 'INSERT', 'DELETE'], // the daily rollups per month and user
  usage_day_totals: ['SELECT', 'INSERT', 'DELETE'], // per day, without user and task
  usage_day_users: ['SELECT', 'INSERT', 'DELETE'], // per day, user, task and entry type
  schema_migrations: ['SELECT'],
  applied_tasks: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], // the task IDs of the last `tasks apply`, replaced whole
  run_attempts: ['SELECT', 'INSERT', 'UPDATE'], // each execution that owned a slot
  usage_exceptions: ['SELECT', 'INSERT'], // unbookable usage, append-only like the ledger
  budgets: ['SELECT', 'INSERT'], // budget versions, appended like prices
  model_downgrades: ['SELECT', 'INSERT'], // cheap model versions
  budget_zones: ['SELECT', 'INSERT'], // zones the month summary is kept in
  budget_months: ['SELECT', 'INSERT', 'UPDATE'], // month-to-date spend, kept by the ledger's insert trigger
  budget_reservations: ['SELECT', 'INSERT', 'UPDATE'], // open until settled, released or expired
  budget_events: ['SELECT', 'INSERT', 'UPDATE'], // threshold events, marked delivered
  metric_ledger_totals: ['SELECT'], // what /metrics serves: kept by the triggers (SECURITY DEFINER), never written by the role
  metric_run_counts: ['SELECT'],
  metric_histograms: ['SELECT'],
  rollup_verifications: ['SELECT'], // `rollups verify` runs, written through record_rollup_verification only
  rate_limits: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], // the providers' limits of the last `limits apply`, replaced whole
  rate_limit_state: ['SELECT'], // the limiter's clock and counters, written through rate_limit_acquire and rate_limit_hold only
};

/**
 * The admin page's role: SELECT on what the pages show, nothing else, and not memories, call_embeddings or
 * task_versions (what users asked their agents). A table a later migration adds is readable by default and must be added here.
 */
const READONLY_ALLOWED: Record<string, string[]> = Object.fromEntries(
  Object.keys(ALLOWED)
    .filter((table) => !['memories', 'call_embeddings', 'task_versions'].includes(table))
    .map((table) => [table, ['SELECT']]),
);

/** Every relation in every schema the role can reach (not the catalogs), with what the role may do to it. */
async function appPrivileges(db: pg.Client, role = APP_ROLE): Promise<Record<string, string[]>> {
  const { rows } = await db.query<{ name: string; kind: string; privileges: string[] }>(
    `select case when n.nspname = 'public' then c.relname else n.nspname || '.' || c.relname end as name, c.relkind as kind,
            array(select p from unnest($2::text[]) p where has_table_privilege($1, c.oid, p)) as privileges
       from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where c.relkind in ('r', 'p', 'v', 'm', 'f')
        and n.nspname not in ('pg_catalog', 'information_schema', 'pg_toast') and n.nspname not like 'pg_temp%'
      order by 1`,
    [role, PRIVILEGES],
  );
  return Object.fromEntries(rows.map((r) => [r.name, r.privileges]));
}

describe('grants, walked over every table', () => {
  it('give the application role exactly its allow-list, on every table there is', async () => {
    expect(await appPrivileges(owner)).toEqual(ALLOWED);
  });

  it('give the read-only role SELECT on its allow-list and nothing else, on every table there is', async () => {
    const privileges = await appPrivileges(owner, READONLY_ROLE);
    expect(Object.fromEntries(Object.entries(privileges).filter(([, p]) => p.length > 0))).toEqual(READONLY_ALLOWED);
    const seqs = await owner.query<{ name: string }>(
      `select c.relname as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'public' and c.relkind = 'S' and (has_sequence_privilege($1, c.oid, 'usage') or has_sequence_privilege($1, c.oid, 'update'))`,
      [READONLY_ROLE],
    );
    expect(seqs.rows).toEqual([]);
    const role = await owner.query(`select rolsuper, rolcreaterole, rolcreatedb, rolbypassrls from pg_roles where rolname = $1`, [
      READONLY_ROLE,
    ]);
    expect(role.rows[0]).toEqual({ rolsuper: false, rolcreaterole: false, rolcreatedb: false, rolbypassrls: false });
  });

  it('catch a table that a later migration adds: readable by default, never writable, and not on the list', async () => {
    await owner.query('begin');
    try {
      await owner.query('create table added_later (id bigserial primary key, note text)');
      const privileges = await appPrivileges(owner);
      expect(privileges.added_later).toEqual(['SELECT']); // the default privileges at the end of migrations/001_baseline.sql
      expect(privileges).not.toEqual(ALLOWED);
      const seq = await owner.query(
        `select has_sequence_privilege($1, 'added_later_id_seq', 'usage') as usage, has_sequence_privilege($1, 'added_later_id_seq', 'update') as setval`,
        [APP_ROLE],
      );
      expect(seq.rows[0]).toEqual({ usage: true, setval: false });
    } finally {
      await owner.query('rollback');
    }
  });

  it('give the application role no sequence it may reset, and no SECURITY DEFINER function it did not need', async () => {
    const seqs = await owner.query<{ name: string }>(
      `select c.relname as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'public' and case when c.relkind = 'S' then has_sequence_privilege($1, c.oid, 'update') else false end`,
      [APP_ROLE],
    );
    expect(seqs.rows).toEqual([]);
    const definers = await owner.query<{ name: string }>(
      `select p.proname as name from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname = 'public' and p.prosecdef order by 1`,
    );
    // Trigger functions (one cannot be called on its own) that keep the /metrics counters the role may not write, and
    // the one door into rollup_verifications, and the two into the rate limiter's state
    expect(definers.rows.map((r) => r.name)).toEqual([
      'metric_count_duplicate',
      'metric_count_ledger_entry',
      'metric_count_run',
      'rate_limit_acquire',
      'rate_limit_hold',
      'record_rollup_verification',
    ]);
  });
});

/** SECURITY DEFINER functions in the public schema whose search_path is not fixed by the function itself. */
async function definersWithoutSearchPath(db: pg.Client): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>(
    `select p.proname as name from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname = 'public' and p.prosecdef
        and not exists (select 1 from unnest(coalesce(p.proconfig, '{}')) c where c like 'search_path=%')
      order by 1`,
  );
  return rows.map((r) => r.name);
}

describe('SECURITY DEFINER functions', () => {
  it('each fix their search_path, so no caller schema or temp table can stand in for a table they write', async () => {
    expect(await definersWithoutSearchPath(owner)).toEqual([]);
  });

  it('the walk catches one that does not', async () => {
    await owner.query('begin');
    try {
      await owner.query(`create function added_later_definer() returns int language sql security definer as 'select 1'`);
      expect(await definersWithoutSearchPath(owner)).toEqual(['added_later_definer']);
    } finally {
      await owner.query('rollback');
    }
  });
});

// ---------------------------------------------------------------------------------------------------------------
// What the database itself refuses from anyone but the owner, and who it says wrote a row
// ---------------------------------------------------------------------------------------------------------------

/** Runs `sql` as the application role in a transaction that is rolled back; the error, or undefined when it passed. */
async function asApp(sql: string, params: unknown[] = []): Promise<{ code?: string; message: string } | undefined> {
  const client = await ctx.pool.connect();
  try {
    await client.query('begin');
    return await client.query(sql, params).then(
      () => undefined,
      (e: { code?: string; message: string }) => ({ code: e.code, message: e.message }),
    );
  } finally {
    await client.query('rollback');
    client.release();
  }
}

const CREDIT = `insert into usage_ledger (idempotency_key, entry_type, reason, user_id, cost_usd) values ($1, 'credit', $2, 'u1', -1)`;
const PRICE = `insert into model_prices (model, version, effective_from, input_per_million, output_per_million, source)
               values ($1, $2, $3, $4, 1, 'test')`;

describe('the database, for anyone but the owner', () => {
  it.each(['', '   ', '\t\n'])('refuses a credit or correction whose reason is blank: %j', async (reason) => {
    expect(await asApp(CREDIT, [`blank-${reason.length}`, reason])).toMatchObject({ code: '23514', message: /reason_not_blank/ });
    expect(await asApp(CREDIT, [`worded-${reason.length}`, `goodwill${reason}`])).toBeUndefined();
  });

  it('refuses a negative price', async () => {
    expect(await asApp(PRICE, ['test/negative', 'v1', new Date(), '-0.01'])).toMatchObject({ code: '23514', message: /not_negative/ });
    expect(await asApp(PRICE, ['test/negative', 'v1', new Date(), '0'])).toBeUndefined();
  });

  it('refuses a price dated before calls of its model already booked; the owner may', async () => {
    // grants-1 booked openai/gpt-4o-mini on 2026-06-01: a version from May would re-price it in every report that prices history
    const backdated = ['openai/gpt-4o-mini', 'sneaky', new Date('2026-05-01T00:00:00Z'), '0'];
    expect(await asApp(PRICE, backdated)).toMatchObject({ code: '23514', message: /before calls already booked/ });
    expect(await asApp(PRICE, ['test/never-booked', 'v1', new Date('2024-07-18T00:00:00Z'), '0.1'])).toBeUndefined();
    await owner.query('begin');
    try {
      await owner.query(PRICE, backdated);
    } finally {
      await owner.query('rollback');
    }
  });

  it('refuses a ledger entry dated away from now, through book_usage or directly; the owner may load history', async () => {
    const at = new Date(Date.now() - 10 * 60_000);
    await expect(recordUsage(ctx.pool, chatBooking('grants-backdated', 'u1', at))).rejects.toMatchObject({ code: '23514' });
    await expect(recordUsage(ctx.pool, chatBooking('grants-future', 'u1', new Date(Date.now() + 10 * 60_000)))).rejects.toMatchObject({
      code: '23514',
    });
    expect(
      await asApp(`${CREDIT.replace(', cost_usd)', ', cost_usd, created_at)').replace('-1)', "-1, now() - interval '1 day')")}`, [
        'old',
        'why',
      ]),
    ).toMatchObject({ code: '23514', message: /dated/ });
    const now = await recordUsage(ctx.pool, chatBooking('grants-now', 'u1', new Date(Date.now() - 60_000)));
    expect(now.created_by).toBe(APP_ROLE);
    const history = await recordUsage(ctx.ownerPool, chatBooking('grants-history', 'u1', new Date('2026-06-02T00:00:00Z')));
    expect(history.created_by).toBe(OWNER_ROLE);
  });

  it('records who wrote each credit, correction, price and budget: the session user, whatever the caller says', async () => {
    const credit = await creditUser(ctx.pool, { userId: 'u1', amount: '1', reason: 'goodwill' });
    expect(credit.created_by).toBe(APP_ROLE);
    const client = await ctx.pool.connect();
    try {
      const { rows } = await client.query<{ created_by: string }>(
        `insert into usage_ledger (idempotency_key, entry_type, reason, user_id, cost_usd, created_by)
         values ('spoofed', 'credit', 'goodwill', 'u1', -1, 'someone-else') returning created_by`,
      );
      expect(rows[0].created_by).toBe(APP_ROLE);
    } finally {
      client.release();
    }
    const { rows } = await owner.query<{ t: string; created_by: string }>(
      `select 'price' as t, created_by from model_prices where created_at > now() - interval '1 hour'
       union select 'budget', created_by from budgets`,
    );
    await applyBudgets(ctx.pool, { budgets: [{ userId: 'u-created-by', monthlyLimitUsd: '5', timeZone: 'UTC' }] }, 'test');
    const budget = await owner.query(`select created_by from budgets where user_id = 'u-created-by'`);
    expect(budget.rows).toEqual([{ created_by: APP_ROLE }]);
    expect(rows.every((r) => r.created_by === APP_ROLE)).toBe(true);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Migrations: only the owner, only through `cronledger db migrate`
// ---------------------------------------------------------------------------------------------------------------

describe('cronledger db migrate', () => {
  it('as the owner: nothing pending on a migrated database', async () => {
    const r = await runCli(['db', 'migrate'], ctx.env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe('migrations up to date\n');
  });

  it('refuses the application role as the migrating role, naming DATABASE_OWNER_URL, password hidden', async () => {
    const fresh = `grants_unmigrated_${process.pid}`;
    await owner.query(`create schema ${fresh}`);
    try {
      // A pending migration the application role would have to run: it may not create its table.
      const r = await runCli(['db', 'migrate'], { ...ctx.env, DATABASE_OWNER_URL: appUrlWithSearchPath(fresh) });
      expect(r.code).not.toBe(0);
      expect(r.stderr).toMatch(/DATABASE_OWNER_URL/);
      expect(r.stderr).not.toMatch(/\n\s+at /);
      expect(r.stderr).not.toContain(new URL(ctx.databaseUrl).password);
    } finally {
      await owner.query(`drop schema ${fresh} cascade`);
    }
  });

  it('`db roles` (docker compose runs it before migrating) re-applies both roles idempotently, as ordinary login roles', async () => {
    const env = {
      ...ctx.env,
      DATABASE_SUPERUSER_URL: inject('stack').adminDatabaseUrl,
      CRONLEDGER_OWNER_PASSWORD: new URL(ctx.ownerDatabaseUrl).password,
      CRONLEDGER_APP_PASSWORD: new URL(ctx.databaseUrl).password,
      // The roles are cluster-wide: without it `db roles` gives the read-only role a new random password, and the
      // admin tests running beside this file could no longer connect.
      CRONLEDGER_READONLY_PASSWORD: new URL(ctx.readonlyDatabaseUrl).password,
    };
    const r = await runCli(['db', 'roles'], env);
    expect(r.code, r.stderr).toBe(0);
    for (const pw of [env.CRONLEDGER_OWNER_PASSWORD, env.CRONLEDGER_APP_PASSWORD, env.CRONLEDGER_READONLY_PASSWORD])
      expect(r.stdout + r.stderr).not.toContain(pw);
    const { rows } = await owner.query(
      `select rolname, rolsuper or rolcreaterole or rolcreatedb or rolbypassrls or rolreplication as special, rolcanlogin
         from pg_roles where rolname in ('cronledger_owner', 'cronledger_app') order by 1`,
    );
    expect(rows).toEqual([
      { rolname: 'cronledger_app', special: false, rolcanlogin: true },
      { rolname: 'cronledger_owner', special: false, rolcanlogin: true },
    ]);
    expect((await ctx.pool.query('select 1 as ok')).rows).toEqual([{ ok: 1 }]); // the password still opens the door
    const missing = await runCli(['db', 'roles'], { ...env, CRONLEDGER_APP_PASSWORD: '' });
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain('CRONLEDGER_APP_PASSWORD is not set');
  });

  it('without DATABASE_OWNER_URL, says which variable to set', async () => {
    const { DATABASE_OWNER_URL: _o, ...env } = ctx.env;
    const r = await runCli(['db', 'migrate'], env);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('DATABASE_OWNER_URL is not set (DATABASE_URL is the application role, which may not migrate)');
  });
});

/** The application role's URL with a search_path of an empty schema, where every migration is pending. */
function appUrlWithSearchPath(schema: string): string {
  const url = new URL(ctx.databaseUrl);
  url.searchParams.set('options', `-c search_path=${schema}`);
  return url.toString();
}
