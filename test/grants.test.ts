import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { applyBudgets } from '../src/budgets/budgets-store';
import { OPERATOR_ROLE, OWNER_ROLE, READONLY_ROLE, RETIRED_APP_ROLE, WORKER_ROLE } from '../src/db/roles';
import { adjustEntry, creditUser } from '../src/ledger/entries';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { recordUsage } from '../src/ledger/record-usage';
import { runCli } from './support/cli';
import { chatBooking } from './support/bookings';
import { createTestContext, type TestContext } from './support/context';

/**
 * Who may write what, one role per job: the worker role reads and executes the functions a run needs, and writes no
 * table itself; the operator role writes credits, adjustments, prices, budgets and task versions through functions
 * that record who; the read-only role reads; the retired application role holds nothing. Each refusal must come from
 * PostgreSQL's privileges (SQLSTATE 42501), not from the append-only triggers, which stay as a second guard.
 */

let ctx: TestContext;
let owner: pg.Client;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
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

const forbidden = (table: string, role: string) => [
  `update ${table} set created_at = now()`,
  `delete from ${table}`,
  `truncate ${table}`,
  `truncate ${table} cascade`,
  `alter table ${table} disable trigger all`,
  `alter table ${table} disable trigger user`,
  `alter table ${table} add column sneaky integer`,
  `alter table ${table} owner to ${role}`,
  `drop table ${table}`,
  `drop table ${table} cascade`,
  `lock table ${table} in share mode`,
  `create trigger sneaky before insert on ${table} for each row execute function forbid_append_only_change()`,
];

/** Writes no role but the owner may make directly (the functions make them, for the roles they are granted to). */
const DIRECT_WRITES = [
  `insert into usage_ledger (idempotency_key, entry_type, reason, user_id, cost_usd) values ('direct', 'credit', 'why', 'u1', -1)`,
  `insert into model_prices (model, version, effective_from, input_per_million, source) values ('m', 'v', now(), 0, 'x')`,
  `insert into model_price_rates (price_id, service_tier, long_context, input_per_million)
   select id, 'batch', false, 0 from model_prices limit 1`,
  `select nextval('model_prices_id_seq')`,
  `insert into budgets (user_id, monthly_limit_usd, source) values ('u1', 1000, 'x')`,
  `update budget_months set spent_usd = 0`,
  `delete from budget_reservations`,
  `insert into usage_rollups (zone, day, user_id, entry_type, status, entries, cost_usd, first_entry_id, last_entry_id)
   values ('UTC', '2026-06-01', 'u1', 'usage', 'ok', 1, 0, 1, 1)`,
  `delete from usage_day_totals`,
  `update rollup_zones set last_entry_id = 0`,
  `update runs set status = 'completed'`,
  `insert into task_versions (task_id, fingerprint, definition) values ('t', 'f', '{}')`,
  `select setval('usage_ledger_id_seq', 1)`,
  `create table sneaky (id int)`,
  `create schema sneaky`,
  `set session_replication_role = replica`,
  `select set_config('session_replication_role', 'replica', false)`,
];

/** Runs `sql` as `pool`'s role in a transaction that is rolled back; the error, or undefined when it passed. */
async function attempt(pool: pg.Pool, sql: string, params: unknown[] = []): Promise<{ code?: string; message: string } | undefined> {
  const client = await pool.connect();
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

describe.each([
  { role: WORKER_ROLE, pool: () => ctx.pool },
  { role: OPERATOR_ROLE, pool: () => ctx.operatorPool },
])('$role', ({ role, pool }) => {
  it.each([...forbidden('usage_ledger', role), ...forbidden('model_prices', role), ...DIRECT_WRITES, `alter role ${role} superuser`])(
    'is refused by privilege: %s',
    async (sql) => {
      const before = await guarded();
      const err = await attempt(pool(), sql);
      expect(err, `${sql} succeeded as ${role}`).toBeDefined();
      expect({ code: err?.code, message: err?.message }).toMatchObject({ code: '42501' });
      expect(await guarded()).toBe(before);
    },
  );

  it('is an ordinary login role: not superuser, cannot create roles or databases, bypass RLS or act as the owner', async () => {
    expect(await roleAttributes(role)).toEqual({ ...ORDINARY, rolcanlogin: true });
  });
});

const ORDINARY = {
  rolsuper: false,
  rolcreaterole: false,
  rolcreatedb: false,
  rolbypassrls: false,
  rolreplication: false,
  acts_as_owner: false,
  creates_schemas: false,
  creates_tables: false,
};

async function roleAttributes(role: string): Promise<Record<string, boolean>> {
  const { rows } = await owner.query(
    `select rolsuper, rolcreaterole, rolcreatedb, rolbypassrls, rolreplication, rolcanlogin,
            pg_has_role($1, table_owner, 'usage') as acts_as_owner,
            has_database_privilege($1, current_database(), 'create') as creates_schemas,
            has_schema_privilege($1, 'public', 'create') as creates_tables
       from pg_roles, (select pg_get_userbyid(relowner) as table_owner from pg_class where oid = 'usage_ledger'::regclass) o
      where rolname = $1`,
    [role],
  );
  return rows[0] as Record<string, boolean>;
}

describe('the retired application role', () => {
  it('cannot log in and holds nothing: no table, sequence or function privilege beyond what PUBLIC holds', async () => {
    expect(await roleAttributes(RETIRED_APP_ROLE)).toEqual({ ...ORDINARY, rolcanlogin: false });
    expect(await tablePrivileges(owner, RETIRED_APP_ROLE)).toEqual({});
    expect(await executableFunctions(owner, RETIRED_APP_ROLE)).toEqual(PUBLIC_HELPERS);
    const { rows } = await owner.query(
      `select exists (select 1 from pg_class c join pg_namespace n on n.oid = c.relnamespace
                       where n.nspname = 'public' and case when c.relkind = 'S' then has_sequence_privilege($1, c.oid, 'usage') else false end) as sequences`,
      [RETIRED_APP_ROLE],
    );
    expect(rows[0]).toEqual({ sequences: false });
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Every table and every function, against an allow-list per role
// ---------------------------------------------------------------------------------------------------------------

const PRIVILEGES = ['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER'] as const;

/** Every table there is (a table a migration adds is readable by the worker by default, and must be added here). */
const TABLES = [
  'usage_ledger',
  'model_prices',
  'model_price_rates',
  'runs',
  'run_duplicates',
  'memories',
  'call_embeddings',
  'task_versions',
  'report_deliveries',
  'rollup_zones',
  'rollup_months',
  'rollup_queue',
  'rollup_pending',
  'rollup_pending_users',
  'run_rollups',
  'run_rollup_queue',
  'usage_rollups',
  'usage_month_rollups',
  'usage_day_totals',
  'usage_day_users',
  'cost_per_run_days',
  'cost_per_run_stale',
  'schema_migrations',
  'applied_tasks',
  'run_attempts',
  'usage_exceptions',
  'budgets',
  'model_downgrades',
  'budget_zones',
  'budget_months',
  'budget_reservations',
  'budget_events',
  'budget_forecasts',
  'metric_ledger_totals',
  'metric_run_counts',
  'metric_histograms',
  'metric_entry_figures',
  'rollup_verifications',
  'rate_limits',
  'rate_limit_state',
  'reconciliation_imports',
  'provider_usage_rows',
  'reconciliation_entries',
  'rate_limit_hours',
  'budget_pauses',
  'budget_pause_ends',
  'budget_pause_intervals',
];

/**
 * The worker reads what runs, reports, the budget sweep, the rollup refresh and the CLI's reading commands read, and
 * writes nothing directly. Not: a run's replies and their vectors (memories, call_embeddings), which only its SECURITY
 * DEFINER functions touch; budget_zones, which only the ledger's triggers read; the /metrics counters and
 * rollup_verifications, which the admin page reads as the read-only role.
 */
const NOT_READ_BY_WORKER = [
  'memories',
  'call_embeddings',
  'budget_zones',
  'metric_ledger_totals',
  'metric_run_counts',
  'metric_histograms',
  'metric_entry_figures',
  'rollup_verifications',
  'rate_limit_hours',
];
const WORKER_READS = TABLES.filter((table) => !NOT_READ_BY_WORKER.includes(table));
const WORKER_ALLOWED: Record<string, string[]> = Object.fromEntries(WORKER_READS.map((t) => [t, ['SELECT']]));

/** The operator reads what its commands compare against, and writes through its functions only. */
const OPERATOR_ALLOWED: Record<string, string[]> = {
  ...Object.fromEntries(
    [
      'usage_ledger',
      'budgets',
      'model_downgrades',
      'task_versions',
      'applied_tasks',
      'rate_limits',
      // what `reconcile` compares against and lists (it writes through record_reconciliation)
      'reconciliation_imports',
      'provider_usage_rows',
      'reconciliation_entries',
    ].map((t) => [t, ['SELECT']]),
  ),
  // price versions and their rates are added through add_price only
  model_prices: ['SELECT'],
  model_price_rates: ['SELECT'],
};

/**
 * The admin page's role: SELECT on what the pages show, and not memories, call_embeddings or task_versions (what
 * users asked their agents).
 */
const READONLY_ALLOWED: Record<string, string[]> = Object.fromEntries(
  TABLES.filter((table) => !['memories', 'call_embeddings', 'task_versions'].includes(table)).map((table) => [table, ['SELECT']]),
);

/** Every relation in every schema the role can reach (not the catalogs) on which it holds a privilege, with what it may do. */
async function tablePrivileges(db: pg.Client, role: string): Promise<Record<string, string[]>> {
  const { rows } = await db.query<{ name: string; kind: string; privileges: string[] }>(
    `select case when n.nspname = 'public' then c.relname else n.nspname || '.' || c.relname end as name, c.relkind as kind,
            array(select p from unnest($2::text[]) p where has_table_privilege($1, c.oid, p)) as privileges
       from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where c.relkind in ('r', 'p', 'v', 'm', 'f')
        and n.nspname not in ('pg_catalog', 'information_schema', 'pg_toast') and n.nspname not like 'pg_temp%'
      order by 1`,
    [role, PRIVILEGES],
  );
  return Object.fromEntries(rows.filter((r) => r.privileges.length > 0).map((r) => [r.name, r.privileges]));
}

/**
 * Functions every role may execute, as PUBLIC may: pure or read-only helpers (SECURITY INVOKER, so they run with the
 * caller's own privileges and can write nothing the caller could not).
 */
const PUBLIC_HELPERS = [
  'backdating_skew',
  'budget_bands',
  'budget_cheap_model',
  'budget_choice',
  'budget_in_force',
  'budget_month_of',
  'budget_tier',
  'metric_booking_lag_ms',
  'metric_bounds_ms',
  'metric_bucket',
  'rate_limit_cost_us',
  'rate_limit_now_us',
  'rollup_pending_slot',
  'rollup_pending_user_at',
  'written_by_table_owner',
];

/** The booking path's pure pricing functions, which the worker and the read-only role call directly. */
const PRICING = [
  'call_cost',
  'is_long_context',
  'price_call',
  'price_class',
  'price_rates',
  'price_tier',
  'price_version_at',
  'usage_cost',
];

/** The reconciliation's read side: each key of an import against the ledger (the report, the admin page, /metrics). */
const RECONCILIATION_READS = ['reconciliation_keys', 'reconciliation_ledger_side'];

/** What a run, the budget sweep, the monthly report, the rollup refresh, `rollups verify` and `report --reprice` execute. */
const WORKER_FUNCTIONS = [
  ...PUBLIC_HELPERS,
  ...PRICING,
  ...RECONCILIATION_READS,
  'book_usage',
  'budget_cap_choice',
  'budget_month_figures',
  'budget_pauses_due',
  'claim_and_reserve',
  'claim_run',
  'complete_run',
  'expire_reservations',
  'price_in_force',
  'rate_limit_acquire',
  'rate_limit_hold',
  'record_budget_event_delivery',
  'record_budget_pause',
  'record_budget_resume',
  'record_forecast',
  'record_rejected_run',
  'record_report_delivery',
  'record_rollup_verification',
  'record_usage_exception',
  'release_reservations',
  'reprice_usage',
  'reserve_budget',
  'rollups_clear_month',
  'rollups_finish_month',
  'rollups_fold_queues',
  'rollups_recompute_cost_per_run',
  'rollups_rebuild_day',
  'rollups_register_zone',
  'rollups_reset_pending',
  'stage_embedding',
  'store_memory_and_complete_run',
  'worst_case_at_rates',
  'worst_case_call_cost',
  'worst_case_cost',
].sort();

/** Credits, adjustments, prices, budgets, downgrades and `tasks apply`'s applied versions. */
const OPERATOR_FUNCTIONS = [
  ...PUBLIC_HELPERS,
  'add_budget',
  'add_downgrade',
  'add_price',
  'adjust_entry',
  'apply_rate_limits',
  'credit_user',
  'is_long_context',
  'price_in_force',
  'price_rates',
  'price_tier',
  'price_version_at',
  'record_applied_tasks',
  'record_reconciliation',
  'record_task_versions',
].sort();

const READONLY_FUNCTIONS = [...PUBLIC_HELPERS, ...PRICING, ...RECONCILIATION_READS, 'budget_month_figures', 'reprice_usage'].sort();

/** Every function in the public schema the role may EXECUTE, by name (trigger functions cannot be called, so not them). */
async function executableFunctions(db: pg.Client, role: string): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>(
    `select distinct p.proname as name from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname = 'public' and p.prorettype <> 'trigger'::regtype and has_function_privilege($1, p.oid, 'execute')
      order by 1`,
    [role],
  );
  return rows.map((r) => r.name);
}

describe('grants, walked over every table and every function', () => {
  it.each([
    { role: WORKER_ROLE, allowed: WORKER_ALLOWED },
    { role: OPERATOR_ROLE, allowed: OPERATOR_ALLOWED },
    { role: READONLY_ROLE, allowed: READONLY_ALLOWED },
  ])('give $role exactly its table allow-list, on every table there is', async ({ role, allowed }) => {
    expect(await tablePrivileges(owner, role)).toEqual(allowed);
  });

  it.each([
    { role: WORKER_ROLE, allowed: WORKER_FUNCTIONS },
    { role: OPERATOR_ROLE, allowed: OPERATOR_FUNCTIONS },
    { role: READONLY_ROLE, allowed: READONLY_FUNCTIONS },
  ])('let $role execute exactly its function allow-list', async ({ role, allowed }) => {
    expect(await executableFunctions(owner, role)).toEqual(allowed);
  });

  it('give the worker no direct write on the ledger, budgets, rollups or prices: none at all, on any table', async () => {
    const writes = Object.entries(await tablePrivileges(owner, WORKER_ROLE)).filter(([, p]) => p.some((x) => x !== 'SELECT'));
    expect(writes).toEqual([]);
  });

  it('give no role a sequence it may use or reset, and PUBLIC no SECURITY DEFINER function', async () => {
    for (const role of [WORKER_ROLE, OPERATOR_ROLE, READONLY_ROLE]) {
      const seqs = await owner.query<{ name: string }>(
        `select c.relname as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = 'public'
            and case when c.relkind = 'S' then has_sequence_privilege($1, c.oid, 'usage') or has_sequence_privilege($1, c.oid, 'update') else false end`,
        [role],
      );
      expect({ role, seqs: seqs.rows }).toEqual({ role, seqs: [] });
    }
    const { rows } = await owner.query<{ name: string }>(
      `select p.proname as name from pg_proc p join pg_namespace n on n.oid = p.pronamespace, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
        where n.nspname = 'public' and p.prosecdef and a.grantee = 0 and a.privilege_type = 'EXECUTE'
          and p.prorettype <> 'trigger'::regtype`, // a trigger function cannot be called on its own
    );
    expect(rows).toEqual([]);
  });

  it('catch a table or a function that a later migration adds: the table readable by the worker and off its list, the function callable by everyone', async () => {
    await owner.query('begin');
    try {
      await owner.query('create table added_later (id bigserial primary key, note text)');
      await owner.query(`create function added_later_fn() returns int language sql as 'select 1'`);
      const privileges = await tablePrivileges(owner, WORKER_ROLE);
      expect(privileges.added_later).toEqual(['SELECT']); // the default privileges at the end of migrations/032_roles_by_job.sql
      expect(privileges).not.toEqual(WORKER_ALLOWED);
      expect(await tablePrivileges(owner, OPERATOR_ROLE)).toEqual(OPERATOR_ALLOWED);
      expect(await executableFunctions(owner, WORKER_ROLE)).toContain('added_later_fn');
    } finally {
      await owner.query('rollback');
    }
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
  it('are owned by the owner and each fix their search_path, so no caller schema or temp table can stand in for a table they write', async () => {
    expect(await definersWithoutSearchPath(owner)).toEqual([]);
    const { rows } = await owner.query<{ name: string; owner: string }>(
      `select p.proname as name, pg_get_userbyid(p.proowner) as owner from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname = 'public' and p.prosecdef and pg_get_userbyid(p.proowner) <> $1`,
      [OWNER_ROLE],
    );
    expect(rows).toEqual([]);
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
// The doors an attacker with one role's password would try
// ---------------------------------------------------------------------------------------------------------------

describe('as the worker', () => {
  it.each(['memories', 'call_embeddings'])('reading %s (replies and their vectors) is refused by privilege', async (table) => {
    expect(await attempt(ctx.pool, `select * from ${table}`)).toEqual({ code: '42501', message: `permission denied for table ${table}` });
  });

  it('a direct INSERT into the ledger is refused by privilege, on the ledger itself', async () => {
    const err = await attempt(ctx.pool, DIRECT_WRITES[0]);
    expect(err).toEqual({ code: '42501', message: 'permission denied for table usage_ledger' });
    const { rows } = await owner.query(`select has_table_privilege($1, 'usage_ledger', 'insert') as may`, [WORKER_ROLE]);
    expect(rows).toEqual([{ may: false }]);
  });

  it('book_usage with an occurrence time of its own choosing, back or forward, is refused; dated now it books', async () => {
    for (const at of [new Date(Date.now() - 10 * 60_000), new Date(Date.now() + 10 * 60_000), new Date('2026-06-01T00:00:00Z')]) {
      await expect(recordUsage(ctx.pool, chatBooking(`grants-dated-${at.getTime()}`, 'u1', at))).rejects.toMatchObject({
        code: '23514',
        message: /dated .* is refused/,
      });
    }
    const now = await recordUsage(ctx.pool, chatBooking('grants-now', 'u1', new Date(Date.now() - 60_000)));
    expect(now.created_by).toBe(WORKER_ROLE);
  });

  it("may not call the operator's functions: no credit, adjustment, price or budget", async () => {
    for (const sql of [
      `select * from credit_user('w', null, 'why', 'u1', -1)`,
      `select * from adjust_entry('w', 1, 'why', -1)`,
      `select * from add_budget('u1', 1000, 'UTC', now(), 'x')`,
      `select add_price('m', 'v', now(), null, null, 'x', '[{"tier": "standard", "long": false, "input": "0", "output": "0"}]')`,
      `select record_task_versions('[]')`,
    ]) {
      expect(await attempt(ctx.pool, sql)).toMatchObject({ code: '42501', message: /permission denied for function/ });
    }
  });
});

describe('as the operator', () => {
  it('an adjustment and a credit record created_by = the operator, whatever the caller says', async () => {
    const original = (await owner.query<{ id: string }>(`select id from usage_ledger where idempotency_key = 'grants-1'`)).rows[0].id;
    const adjustment = await adjustEntry(ctx.operatorPool, { entryId: original, amount: '-0.000001', reason: 'duplicate call' });
    expect(adjustment).toMatchObject({ entry_type: 'adjustment', created_by: OPERATOR_ROLE });
    const credit = await creditUser(ctx.operatorPool, { userId: 'u1', amount: '1', reason: 'goodwill' });
    expect(credit.created_by).toBe(OPERATOR_ROLE);
    const stored = await owner.query(`select created_by from usage_ledger where id in ($1, $2)`, [adjustment.id, credit.id]);
    expect(stored.rows).toEqual([{ created_by: OPERATOR_ROLE }, { created_by: OPERATOR_ROLE }]);
  });

  it("may not call the worker's functions: no booking, claim, reservation or rollup write", async () => {
    for (const sql of [
      `select book_usage('o', 'u1', null, null, null, 'openai/gpt-4o-mini', null, 'chat', 'ok', 1, 1, 0, 1, 0, 0, 0, null, null, null, null, null, null)`,
      `select claim_run('k', 't', 'u1', 'w', 'r', now(), 'x', false, null)`,
      `select rollups_fold_queues(null)`,
      `select expire_reservations()`,
    ]) {
      expect({ sql, ...(await attempt(ctx.operatorPool, sql)) }).toMatchObject({
        sql,
        code: '42501',
        message: /permission denied for function/,
      });
    }
  });
});

// ---------------------------------------------------------------------------------------------------------------
// What the database itself refuses from anyone but the owner, and who it says wrote a row
// ---------------------------------------------------------------------------------------------------------------

const CREDIT = `select * from credit_user($1, null, $2, 'u1', -1)`;
/** A price version through add_price, as `prices apply` adds one: $4 is its standard input rate, $5 its batch tier's. */
const PRICE = `select add_price($1, $2, $3, null, null, 'test',
                 jsonb_build_array(jsonb_build_object('tier', 'standard', 'long', false, 'input', $4::text, 'output', '1'),
                                   jsonb_build_object('tier', 'batch', 'long', false, 'input', coalesce($5::text, '0'), 'output', '1')))`;

describe('the database, for anyone but the owner', () => {
  it.each(['', '   ', '\t\n'])('refuses a credit or correction whose reason is blank: %j', async (reason) => {
    expect(await attempt(ctx.operatorPool, CREDIT, [`blank-${reason.length}`, reason])).toMatchObject({
      code: '23514',
      message: /reason_not_blank/,
    });
    expect(await attempt(ctx.operatorPool, CREDIT, [`worded-${reason.length}`, `goodwill${reason}`])).toBeUndefined();
  });

  it('refuses a negative price, on the version or on a tier, and a rate it would have to round', async () => {
    expect(await attempt(ctx.operatorPool, PRICE, ['test/negative', 'v1', new Date(), '-0.01', null])).toMatchObject({
      code: '23514',
      message: /not_negative/,
    });
    expect(await attempt(ctx.operatorPool, PRICE, ['test/negative', 'v1', new Date(), '0', '-0.01'])).toMatchObject({
      code: '23514',
      message: /model_price_rates_input_per_million_check/,
    });
    expect(await attempt(ctx.operatorPool, PRICE, ['test/negative', 'v1', new Date(), '0.0000000000001', null])).toMatchObject({
      code: '23514',
      message: /the standard input rate has more than 12 fractional digits/,
    });
    expect(await attempt(ctx.operatorPool, PRICE, ['test/negative', 'v1', new Date(), '0', null])).toBeUndefined();
  });

  it('refuses a price dated before calls of its model already booked; the owner may', async () => {
    // grants-1 booked openai/gpt-4o-mini on 2026-06-01: a version from May would re-price it in every report that prices history
    const backdated = ['openai/gpt-4o-mini', 'sneaky', new Date('2026-05-01T00:00:00Z'), '0', null];
    expect(await attempt(ctx.operatorPool, PRICE, backdated)).toMatchObject({ code: '23514', message: /before calls already booked/ });
    expect(
      await attempt(ctx.operatorPool, PRICE, ['test/never-booked', 'v1', new Date('2024-07-18T00:00:00Z'), '0.1', null]),
    ).toBeUndefined();
    await owner.query('begin');
    try {
      await owner.query(PRICE, backdated);
    } finally {
      await owner.query('rollback');
    }
  });

  it('add_price records the operator as who added the version, whatever the rates say', async () => {
    const client = await ctx.operatorPool.connect();
    try {
      await client.query('begin');
      const { rows } = await client.query<{ id: string }>(`${PRICE} as id`, ['test/stamped', 'v1', new Date(), '0.1', '0.05']);
      const row = await client.query(
        `select p.created_by, r.service_tier, r.input_per_million from model_prices p join model_price_rates r on r.price_id = p.id
          where p.id = $1`,
        [rows[0].id],
      );
      expect(row.rows).toEqual([{ created_by: OPERATOR_ROLE, service_tier: 'batch', input_per_million: '0.050000000000' }]);
    } finally {
      await client.query('rollback');
      client.release();
    }
  });

  it('lets the owner load history dated in the past, stamped as the owner', async () => {
    const history = await recordUsage(ctx.ownerPool, chatBooking('grants-history', 'u1', new Date('2026-06-02T00:00:00Z')));
    expect(history.created_by).toBe(OWNER_ROLE);
  });

  it('records who wrote each price and budget: the session user', async () => {
    const { rows } = await owner.query<{ created_by: string }>(`select created_by from model_prices`);
    expect(new Set(rows.map((r) => r.created_by))).toEqual(new Set([OPERATOR_ROLE]));
    await applyBudgets(ctx.operatorPool, { budgets: [{ userId: 'u-created-by', monthlyLimitUsd: '5', timeZone: 'UTC' }] }, 'test');
    const budget = await owner.query(`select created_by from budgets where user_id = 'u-created-by'`);
    expect(budget.rows).toEqual([{ created_by: OPERATOR_ROLE }]);
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

  it('refuses the worker role as the migrating role, naming DATABASE_OWNER_URL, password hidden', async () => {
    const fresh = `grants_unmigrated_${process.pid}`;
    await owner.query(`create schema ${fresh}`);
    try {
      // A pending migration the worker role would have to run: it may not create its table.
      const r = await runCli(['db', 'migrate'], { ...ctx.env, DATABASE_OWNER_URL: workerUrlWithSearchPath(fresh) });
      expect(r.code).not.toBe(0);
      expect(r.stderr).toMatch(/DATABASE_OWNER_URL/);
      expect(r.stderr).not.toMatch(/\n\s+at /);
      expect(r.stderr).not.toContain(new URL(ctx.databaseUrl).password);
    } finally {
      await owner.query(`drop schema ${fresh} cascade`);
    }
  });

  it('`db roles` (docker compose runs it before migrating) re-applies the roles idempotently, as ordinary roles', async () => {
    const env = {
      ...ctx.env,
      DATABASE_SUPERUSER_URL: inject('stack').adminDatabaseUrl,
      CRONLEDGER_OWNER_PASSWORD: new URL(ctx.ownerDatabaseUrl).password,
      CRONLEDGER_WORKER_PASSWORD: new URL(ctx.databaseUrl).password,
      CRONLEDGER_OPERATOR_PASSWORD: new URL(ctx.operatorDatabaseUrl).password,
      // The roles are cluster-wide: without it `db roles` gives the read-only role a new random password, and the
      // admin tests running beside this file could no longer connect.
      CRONLEDGER_READONLY_PASSWORD: new URL(ctx.readonlyDatabaseUrl).password,
    };
    const r = await runCli(['db', 'roles'], env);
    expect(r.code, r.stderr).toBe(0);
    for (const pw of [
      env.CRONLEDGER_OWNER_PASSWORD,
      env.CRONLEDGER_WORKER_PASSWORD,
      env.CRONLEDGER_OPERATOR_PASSWORD,
      env.CRONLEDGER_READONLY_PASSWORD,
    ])
      expect(r.stdout + r.stderr).not.toContain(pw);
    const { rows } = await owner.query(
      `select rolname, rolsuper or rolcreaterole or rolcreatedb or rolbypassrls or rolreplication as special, rolcanlogin
         from pg_roles where rolname like 'cronledger_%' order by 1`,
    );
    expect(rows).toEqual([
      { rolname: 'cronledger_app', special: false, rolcanlogin: false },
      { rolname: 'cronledger_operator', special: false, rolcanlogin: true },
      { rolname: 'cronledger_owner', special: false, rolcanlogin: true },
      { rolname: 'cronledger_readonly', special: false, rolcanlogin: true },
      { rolname: 'cronledger_worker', special: false, rolcanlogin: true },
    ]);
    expect((await ctx.pool.query('select 1 as ok')).rows).toEqual([{ ok: 1 }]); // the passwords still open the doors
    expect((await ctx.operatorPool.query('select 1 as ok')).rows).toEqual([{ ok: 1 }]);
    for (const variable of ['CRONLEDGER_WORKER_PASSWORD', 'CRONLEDGER_OPERATOR_PASSWORD']) {
      const missing = await runCli(['db', 'roles'], { ...env, [variable]: '' });
      expect(missing.code).not.toBe(0);
      expect(missing.stderr).toContain(`${variable} is not set`);
    }
  });

  it('without DATABASE_OWNER_URL, says which variable to set', async () => {
    const { DATABASE_OWNER_URL: _o, ...env } = ctx.env;
    const r = await runCli(['db', 'migrate'], env);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('DATABASE_OWNER_URL is not set (DATABASE_URL is the worker role, which may not migrate)');
  });
});

/** The worker role's URL with a search_path of an empty schema, where every migration is pending. */
function workerUrlWithSearchPath(schema: string): string {
  const url = new URL(ctx.databaseUrl);
  url.searchParams.set('options', `-c search_path=${schema}`);
  return url.toString();
}
