import { Command, CommanderError } from 'commander';
import { UserError } from '../errors';

const program = new Command('cronledger')
  .description('Scheduled LLM agent runs on Temporal, exactly once per slot, with an exact USD ledger')
  .showHelpAfterError()
  .enablePositionalOptions() // a group's options stay its own: `runs --task X` lists, `runs retry --task X ...` retries
  .exitOverride();

/**
 * Each top-level command's module, in the order `cronledger --help` lists them. Only the module of the command being
 * run is imported: each module loads its whole graph (the Temporal client, the admin server, the worker SDK, the
 * tokenizers), which would cost every call's start-up for commands it does not run. Anything
 * else (`--help`, `help`, a mistyped command) loads them all, so the help lists every command and commander can
 * suggest the nearest name.
 */
const COMMANDS: Record<string, () => Promise<(program: Command) => void>> = {
  dev: async () => (await import('./commands/dev')).registerDevCommands,
  db: async () => (await import('./commands/db')).registerDbCommands,
  tasks: async () => (await import('./commands/tasks')).registerTasksCommands,
  backfill: async () => (await import('./commands/backfill')).registerBackfillCommand,
  runs: async () => (await import('./commands/runs')).registerRunsCommand,
  prices: async () => (await import('./commands/prices')).registerPricesCommands,
  budgets: async () => (await import('./commands/budgets')).registerBudgetsCommands,
  forecast: async () => (await import('./commands/forecast')).registerForecastCommand,
  limits: async () => (await import('./commands/limits')).registerLimitsCommands,
  ledger: async () => (await import('./commands/ledger')).registerLedgerCommands,
  reconcile: async () => (await import('./commands/reconcile')).registerReconcileCommands,
  report: async () => (await import('./commands/report')).registerReportCommands,
  rollups: async () => (await import('./commands/rollups')).registerRollupsCommands,
  admin: async () => (await import('./commands/admin')).registerAdminCommand,
};
const command = process.argv[2] ?? '';
const loads = Object.hasOwn(COMMANDS, command) ? [COMMANDS[command]] : Object.values(COMMANDS);
for (const register of await Promise.all(loads.map((load) => load()))) register(program);

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
