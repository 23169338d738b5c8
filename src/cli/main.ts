import { Command, CommanderError } from 'commander';
import { UserError } from '../errors';
import { registerAdminCommand } from './commands/admin';
import { registerBackfillCommand } from './commands/backfill';
import { registerBudgetsCommands } from './commands/budgets';
import { registerDbCommands } from './commands/db';
import { registerDevCommands } from './commands/dev';
import { registerForecastCommand } from './commands/forecast';
import { registerLedgerCommands } from './commands/ledger';
import { registerLimitsCommands } from './commands/limits';
import { registerPricesCommands } from './commands/prices';
import { registerReconcileCommands } from './commands/reconcile';
import { registerReportCommands } from './commands/report';
import { registerRollupsCommands } from './commands/rollups';
import { registerRunsCommand } from './commands/runs';
import { registerTasksCommands } from './commands/tasks';

const program = new Command('cronledger')
  .description('Scheduled LLM agent runs on Temporal, exactly once per slot, with an exact USD ledger')
  .showHelpAfterError()
  .enablePositionalOptions() // a group's options stay its own: `runs --task X` lists, `runs retry --task X ...` retries
  .exitOverride();

registerDevCommands(program);
registerDbCommands(program);
registerTasksCommands(program);
registerBackfillCommand(program);
registerRunsCommand(program);
registerPricesCommands(program);
registerBudgetsCommands(program);
registerForecastCommand(program);
registerLimitsCommands(program);
registerLedgerCommands(program);
registerReconcileCommands(program);
registerReportCommands(program);
registerRollupsCommands(program);
registerAdminCommand(program);

try {
  await program.parseAsync(process.argv);
} catch (err) {
  process.exitCode = exitCodeFor(err);
}

function exitCodeFor(err: unknown): number {
  if (err instanceof CommanderError) return err.exitCode === 0 ? 0 : 2; // commander already printed the message
  if (err instanceof UserError) {
    process.stderr.write(`cronledger: ${err.message}\n`);
    return err.exitCode;
  }
  process.stderr.write(`cronledger: unexpected error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  return 1;
}
