import type { Command } from 'commander';
import { UserError } from '../../errors';
import { adjustEntry, creditUser, entryJson, listEntries, type LedgerEntry } from '../../ledger/entries';
import { parseUserId } from '../../ledger/user-id';
import { displayUsd, parseCorrectionUsd } from '../../money';
import { printable } from '../../text-table';
import { withConnections } from '../connect';
import { parseCount } from '../options';
import { printJson, printTable } from '../output';

/**
 * `cronledger ledger` lists entries; `ledger adjust` and `ledger credit` append corrections that point at what they
 * correct. Nothing here edits a row: the table is append-only in the database itself.
 */
export function registerLedgerCommands(program: Command): void {
  const ledger = program
    .command('ledger')
    .description('the append-only usage ledger: list entries (default), append adjustments and credits');

  // The listing is the default subcommand, so `ledger --user u` lists while `ledger credit --user u` credits:
  // options of a parent command would swallow the subcommands' options of the same name.
  ledger
    .command('list', { isDefault: true })
    .description('entries oldest first, with cost per entry (the default: `cronledger ledger [--run ID | --user ID]`)')
    .option('--run <workflowId>', 'only entries of this run (its workflow ID)')
    .option('--user <id>', 'only entries of this user')
    .option('--limit <n>', 'at most this many, newest', '1000')
    .option('--json', 'print JSON (money as exact decimal strings)')
    .action(async (opts: { run?: string; user?: string; limit: string; json?: boolean }) => {
      if (opts.run && opts.user) throw new UserError('give --run or --user, not both');
      if (opts.user !== undefined) parseUserId(opts.user, '--user');
      const limit = parseCount('--limit', opts.limit);
      await withConnections({ db: true }, async ({ pool }) => {
        const entries = await listEntries(pool, { runId: opts.run, userId: opts.user, limit });
        if (opts.json) return printJson({ entries: entries.map(entryJson) });
        if (entries.length === 0) {
          process.stdout.write('no ledger entries match\n');
          return;
        }
        printTable(
          ['ID', 'CREATED', 'TYPE', 'USER', 'RUN', 'MODEL', 'KIND', 'STATUS', 'ATTEMPT', 'TOKENS', 'COST'],
          entries.map((e) => [
            e.id,
            e.created_at.toISOString().replace(/\.\d{3}Z$/, 'Z'),
            e.entry_type === 'usage'
              ? 'usage'
              : e.reconciliation_import_id
                ? `${e.entry_type}→import ${e.reconciliation_import_id}`
                : `${e.entry_type}→${e.original_entry_id ?? '-'}`,
            e.user_id,
            e.run_id ?? '-',
            e.model ?? '-',
            e.kind ?? '-',
            e.entry_type === 'usage' ? e.status : '-',
            e.attempt === null ? '-' : String(e.attempt),
            e.entry_type === 'usage' ? tokens(e) : '-',
            displayUsd(e.cost_usd),
          ]),
          [0, 8, 10],
        );
      });
    });

  ledger
    .command('adjust')
    .description('append a signed correction to an entry (the original is never changed)')
    .requiredOption('--entry <id>', 'the ledger entry to correct')
    .requiredOption('--amount <usd>', 'signed USD amount, e.g. -0.0004 or 0.25 (use --amount=-0.0004 if your shell needs it)')
    .requiredOption('--reason <text>', 'why')
    .option('--json', 'print JSON')
    .action(async (opts: { entry: string; amount: string; reason: string; json?: boolean }) => {
      parseCorrectionUsd(opts.amount, '--amount'); // a bad amount fails before connecting
      await withConnections({ db: 'operator' }, async ({ pool }) => {
        const entry = await adjustEntry(pool, { entryId: opts.entry, amount: opts.amount, reason: opts.reason });
        printAppended(entry, opts.json);
      });
    });

  ledger
    .command('credit')
    .description('append a credit to a user: a negative entry lowering what they owe')
    .requiredOption('--user <id>', 'the user credited')
    .requiredOption('--amount <usd>', 'positive USD amount credited, e.g. 5.00')
    .requiredOption('--reason <text>', 'why')
    .option('--entry <id>', 'the ledger entry this credit makes good')
    .option('--json', 'print JSON')
    .action(async (opts: { user: string; amount: string; reason: string; entry?: string; json?: boolean }) => {
      parseCorrectionUsd(opts.amount, '--amount');
      parseUserId(opts.user, '--user');
      if (opts.entry !== undefined && !/^\d+$/.test(opts.entry)) {
        throw new UserError(`--entry ${JSON.stringify(opts.entry)} is not a ledger entry id (a whole number)`);
      }
      await withConnections({ db: 'operator' }, async ({ pool }) => {
        const entry = await creditUser(pool, { userId: opts.user, amount: opts.amount, reason: opts.reason, originalEntryId: opts.entry });
        printAppended(entry, opts.json);
      });
    });
}

function printAppended(entry: LedgerEntry, json: boolean | undefined): void {
  if (json) return printJson({ entry: entryJson(entry) });
  const target = entry.original_entry_id ? ` correcting entry ${entry.original_entry_id}` : '';
  process.stdout.write(
    `appended ${entry.entry_type} entry ${entry.id} for user ${printable(entry.user_id)}${target}: ${displayUsd(entry.cost_usd)} ` +
      `(exact ${entry.cost_usd} USD), reason: ${printable(entry.reason ?? '')}\n`,
  );
}

function tokens(e: LedgerEntry): string {
  if (e.kind === 'embedding') return `${e.prompt_tokens} emb`;
  const cached = e.cached_prompt_tokens === '0' ? '' : ` (${e.cached_prompt_tokens} cached)`;
  const reasoning = e.reasoning_tokens === '0' ? '' : ` (${e.reasoning_tokens} reasoning)`;
  return `${e.prompt_tokens} in${cached} / ${e.completion_tokens} out${reasoning}`;
}
