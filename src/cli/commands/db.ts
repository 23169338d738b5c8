import type { Command } from 'commander';
import { resolveOwnerDatabaseUrl } from '../../config';
import { migrateDatabase } from '../../db/migrate';
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
}
