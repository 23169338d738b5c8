import { randomBytes } from 'node:crypto';
import type pg from 'pg';

/**
 * The database roles, one per job (their grants end migrations/032_roles_by_job.sql; docs/security.md, "Roles"): the
 * owner runs migrations and owns every table and function; workers (and the CLI's reading and rollup commands) connect
 * as the worker role, which reads and executes the functions a run needs; the operator role (the CLI's credits,
 * adjustments, prices, budgets and `tasks apply`) writes through functions that record who. A private dev cluster
 * gets them from `dev up`; for an external database `cronledger db roles` or a DBA creates them.
 */
export const OWNER_ROLE = 'cronledger_owner';
export const WORKER_ROLE = 'cronledger_worker';
export const OPERATOR_ROLE = 'cronledger_operator';
/** The admin page's role: SELECT only (migrations/001_baseline.sql, at its end). */
export const READONLY_ROLE = 'cronledger_readonly';
/**
 * A role without login, password or privilege (migration 032 revokes what migration 001 grants it). It exists only
 * because migration 001 checks that it does and grants to it.
 */
export const RETIRED_APP_ROLE = 'cronledger_app';

export interface RolePasswords {
  superuser: string;
  owner: string;
  worker: string;
  operator: string;
  readonly: string;
}

/** 32 random bytes, URL-safe: they go into connection URLs without escaping. */
export const generatePassword = (): string => randomBytes(32).toString('base64url');

export const generatePasswords = (): RolePasswords => ({
  superuser: generatePassword(),
  owner: generatePassword(),
  worker: generatePassword(),
  operator: generatePassword(),
  readonly: generatePassword(),
});

/**
 * As a superuser: the four roles exist, log in with these passwords (stored as SCRAM verifiers), and hold nothing
 * special: no superuser, no CREATEROLE, no CREATEDB, no BYPASSRLS, no replication. The retired application role exists
 * too, without login or password.
 */
export async function ensureRoles(
  superuser: pg.ClientBase,
  passwords: Pick<RolePasswords, 'owner' | 'worker' | 'operator' | 'readonly'>,
): Promise<void> {
  await superuser.query(`set password_encryption = 'scram-sha-256'`);
  const ordinary = 'nosuperuser nocreaterole nocreatedb noreplication nobypassrls';
  for (const [role, password] of [
    [OWNER_ROLE, passwords.owner],
    [WORKER_ROLE, passwords.worker],
    [OPERATOR_ROLE, passwords.operator],
    [READONLY_ROLE, passwords.readonly],
    [RETIRED_APP_ROLE, null],
  ] as const) {
    const exists = await superuser.query('select 1 from pg_roles where rolname = $1', [role]);
    const verb = exists.rowCount === 0 ? 'create' : 'alter';
    // Utility statements take no parameters; the password is URL-safe base64, escaped all the same.
    const login = password === null ? 'nologin password null' : `login password ${superuser.escapeLiteral(password)}`;
    await superuser.query(`${verb} role ${role} ${ordinary} ${login}`);
  }
}

/**
 * As a superuser, in the ledger database: the owner role owns the database and every table, sequence and function in
 * its public schema. Stacks created before the roles existed had everything owned by `postgres`; this adopts it.
 */
export async function adoptByOwner(superuserInLedgerDb: pg.Client, database: string): Promise<void> {
  const db = superuserInLedgerDb;
  await db.query(`alter database ${db.escapeIdentifier(database)} owner to ${OWNER_ROLE}`);
  const { rows } = await db.query<{ kind: string; name: string }>(
    `select case c.relkind when 'S' then 'sequence' else 'table' end as kind, format('%I', c.relname) as name
       from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = 'public' and c.relkind in ('r', 'p', 'S') and pg_get_userbyid(c.relowner) <> $1
        and not (c.relkind = 'S' and exists (select 1 from pg_depend d where d.objid = c.oid and d.deptype in ('a', 'i')))
     union all
     select 'function', format('%I(%s)', p.proname, pg_get_function_identity_arguments(p.oid))
       from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname = 'public' and pg_get_userbyid(p.proowner) <> $1`,
    [OWNER_ROLE],
  );
  for (const r of rows) await db.query(`alter ${r.kind} ${r.name} owner to ${OWNER_ROLE}`);
}
