import type { Command } from 'commander';
import { resolveOwnerDatabaseUrl, secretSetting } from '../../config';
import { migrateDatabase } from '../../db/migrate';
import { connectPool } from '../../db/pool';
import { ensureRoles, generatePassword, OWNER_ROLE } from '../../db/roles';
import { UserError } from '../../errors';
import { printJson } from '../output';

export function registerDbCommands(program: Command): void {
  const db = program.command('db').description('the ledger database');

  db.command('migrate')
    .description(
      "apply pending migrations as the owner role (DATABASE_OWNER_URL, else the local stack's owner); workers and other commands never migrate",
    )
    .option('--json', 'machine-readable output')
    .action(async (opts: { json?: boolean }) => {
      const applied = await migrateDatabase(resolveOwnerDatabaseUrl(), 'DATABASE_OWNER_URL');
      if (opts.json) printJson({ applied });
      else process.stdout.write(applied.length ? `applied ${applied.join(', ')}\n` : 'migrations up to date\n');
    });

  db.command('roles')
    .description(
      'as a superuser (DATABASE_SUPERUSER_URL): create or update the roles cronledger_owner, cronledger_worker, cronledger_operator and ' +
        'cronledger_readonly with the passwords in CRONLEDGER_OWNER_PASSWORD, CRONLEDGER_WORKER_PASSWORD, CRONLEDGER_OPERATOR_PASSWORD and ' +
        '(optional) CRONLEDGER_READONLY_PASSWORD, and the database `cronledger` owned by the owner (docker compose runs it)',
    )
    .action(async () => {
      const passwords = {
        owner: requiredSecret('CRONLEDGER_OWNER_PASSWORD'),
        worker: requiredSecret('CRONLEDGER_WORKER_PASSWORD'),
        operator: requiredSecret('CRONLEDGER_OPERATOR_PASSWORD'),
        // The admin page's SELECT-only role must exist for the migrations' grants; without a password set here it
        // gets a random one nobody knows, so it can't log in until CRONLEDGER_READONLY_PASSWORD is given.
        readonly: secretSetting('CRONLEDGER_READONLY_PASSWORD') ?? generatePassword(),
      };
      const pool = await connectPool(requiredSecret('DATABASE_SUPERUSER_URL'), 'DATABASE_SUPERUSER_URL', 1);
      const client = await pool.connect();
      try {
        await ensureRoles(client, passwords);
        const exists = await client.query(`select 1 from pg_database where datname = 'cronledger'`);
        if (exists.rowCount === 0) await client.query(`create database cronledger owner ${OWNER_ROLE}`);
      } finally {
        client.release();
        await pool.end();
      }
      process.stdout.write(
        'roles cronledger_owner, cronledger_worker, cronledger_operator and cronledger_readonly and database cronledger are in place\n',
      );
    });
}

/** A secret setting (NAME or the file NAME_FILE names) that must be set; its value is never printed. */
function requiredSecret(name: string): string {
  const value = secretSetting(name);
  if (!value) throw new UserError(`${name} is not set; set it or ${name}_FILE (docker compose mounts its secrets as files) and retry`);
  return value;
}
