import type { Command } from 'commander';
import { hostname } from 'node:os';
import { resolveConnections, resolveOperatorDatabaseUrl } from '../../config';
import { RECONCILE_SCHEDULE_ID, reconcileTaskQueue } from '../../constants';
import { connectPool } from '../../db/pool';
import { displayUsd } from '../../money';
import { bookReconciliation, summarise, type ReconciledKey } from '../../reconcile/book';
import { parseDayRange } from '../../reconcile/days';
import type { Provider } from '../../reconcile/provider-rows';
import { readProviderReports } from '../../reconcile/read-reports';
import {
  deleteReconcileDailySchedule,
  ensureReconcileDailySchedule,
  parseAt,
  parseDays,
  parseProviders,
} from '../../schedules/reconcile-daily-schedule';
import { printable } from '../../text-table';
import { withConnections } from '../connect';
import { printJson, printTable } from '../output';

/**
 * `cronledger reconcile openai|anthropic --from DAY --to DAY [--file PATH...]`: imports the provider's usage and cost
 * reports and books each difference from the ledger once (docs/reconciliation.md). Everything is read and checked
 * before the database is touched; the import and its entries are one transaction.
 */
export function registerReconcileCommands(program: Command): void {
  const reconcile = program
    .command('reconcile')
    .description(
      "compare the ledger with a provider's own usage and cost reports, per day, model, token class and tier; book the differences once",
    );
  for (const provider of ['openai', 'anthropic'] as const) {
    reconcile
      .command(provider)
      .description(
        provider === 'openai'
          ? "OpenAI's organization Usage and Costs APIs (admin key OPENAI_ADMIN_KEY), or saved pages of them"
          : "Anthropic's usage and cost reports (admin key ANTHROPIC_ADMIN_KEY), or saved pages of them",
      )
      .requiredOption('--from <day>', 'first UTC day, YYYY-MM-DD')
      .requiredOption('--to <day>', 'last UTC day, YYYY-MM-DD (inclusive)')
      .option('--file <path...>', 'read these saved report pages (JSON as the API sent them) instead of calling the API')
      .option('--whole-organization', "take all of the organization's spend as cronledger's (no other project spends)")
      .option('--json', 'print JSON (money and tokens as exact decimal strings)')
      .action(async (opts: { from: string; to: string; file?: string[]; wholeOrganization?: boolean; json?: boolean }) => {
        await reconcileCommand(provider, opts);
      });
  }

  reconcile
    .command('worker')
    .description(
      "run the worker that does the reconcile-daily schedule's imports: the only process that needs DATABASE_OPERATOR_URL and the admin keys",
    )
    .option('--whole-organization', "take all of the organization's spend as cronledger's (no other project spends)")
    .action(async (opts: { wholeOrganization?: boolean }) => {
      await reconcileWorker(opts.wholeOrganization === true);
    });

  reconcile
    .command('schedule')
    .description(`create or update the ${RECONCILE_SCHEDULE_ID} schedule (reconcileDaily every day at --at UTC), or --delete it`)
    .option('--providers <list>', 'comma-separated: openai, anthropic', 'openai,anthropic')
    .option('--at <HH:MM>', 'time of day (UTC) it runs', '04:00')
    .option('--days <n>', 'reconcile the last N days before today (UTC), to catch a provider reporting late', '1')
    .option('--delete', `delete the ${RECONCILE_SCHEDULE_ID} schedule`)
    .action(async (opts: { providers: string; at: string; days: string; delete?: boolean }) => {
      const settings = { providers: parseProviders(opts.providers), ...parseAt(opts.at), days: parseDays(opts.days) };
      await withConnections({ temporal: true }, async ({ client, conn }) => {
        if (opts.delete) {
          const outcome = await deleteReconcileDailySchedule(client);
          process.stdout.write(`${outcome.padEnd(9)} ${RECONCILE_SCHEDULE_ID}\n`);
          return;
        }
        const outcome = await ensureReconcileDailySchedule(client, settings, conn.taskQueue);
        const at = `${opts.at} UTC`;
        process.stdout.write(
          `${outcome.padEnd(9)} ${RECONCILE_SCHEDULE_ID} (${settings.providers.join(',')}, the last ${settings.days} day(s), daily at ${at}); ` +
            `its imports run on \`cronledger reconcile worker\` (task queue ${reconcileTaskQueue(conn.taskQueue)})\n`,
        );
      });
    });
}

/**
 * `cronledger reconcile worker`: polls the reconcile task queue until SIGINT/SIGTERM (in-flight imports finish first).
 * Run it where DATABASE_OPERATOR_URL, the admin keys and the scope settings are; the main workers never get them.
 */
async function reconcileWorker(wholeOrganization: boolean): Promise<void> {
  const conn = resolveConnections(process.env, { temporal: true, db: false });
  const operatorPool = await connectPool(resolveOperatorDatabaseUrl(), 'DATABASE_OPERATOR_URL', 2);
  const taskQueue = reconcileTaskQueue(conn.taskQueue);
  // The worker SDK (its native core and webpack) is imported here, by the one subcommand that runs a worker: loaded at
  // start-up it made every other `reconcile` command slower to start.
  const [{ NativeConnection }, { temporalConnectionOptions }, { createReconcileWorker }] = await Promise.all([
    import('@temporalio/worker'),
    import('../../client'),
    import('../../worker-setup'),
  ]);
  try {
    const connection = await NativeConnection.connect(temporalConnectionOptions(conn));
    try {
      const worker = await createReconcileWorker({
        connection,
        namespace: conn.namespace,
        taskQueue,
        identity: `reconcile-${hostname()}-${process.pid}`,
        deps: { operatorPool, env: process.env, wholeOrganization },
      });
      process.stdout.write(`reconcile worker polling ${taskQueue} in namespace ${conn.namespace}\n`);
      await worker.run();
    } finally {
      await connection.close();
    }
  } finally {
    await operatorPool.end();
  }
}

async function reconcileCommand(
  provider: Provider,
  opts: { from: string; to: string; file?: string[]; wholeOrganization?: boolean; json?: boolean },
): Promise<void> {
  const { from, to } = parseDayRange(opts.from, opts.to);
  const input = await readProviderReports({
    provider,
    from,
    to,
    files: opts.file ?? [],
    wholeOrganization: opts.wholeOrganization === true,
    env: process.env,
  });
  await withConnections({ db: 'operator' }, async ({ pool }) => {
    const booked = await bookReconciliation(pool, input);
    const summary = summarise(booked.keys);
    const outOfScopeRows = input.rows.filter((r) => !r.inScope).length;
    if (opts.json) {
      return printJson({
        provider,
        from,
        to,
        source: input.source,
        pages: input.pages,
        pagesSha256: input.pagesSha256,
        importId: booked.importId,
        importedAt: booked.importedAt,
        ...summary,
        outOfScopeRows,
        outsideRangeRows: input.outsideRange,
        keys: booked.keys,
      });
    }
    if (booked.keys.length > 0) {
      printTable(
        [
          'DAY',
          'MODEL',
          'CLASS',
          'TIER',
          'SIDE',
          'PROVIDER TOKENS',
          'PROVIDER USD',
          'LEDGER TOKENS',
          'LEDGER USD',
          'BOOKED TOKENS',
          'BOOKED USD',
        ],
        booked.keys.map((k) => row(k)),
        [5, 6, 7, 8, 9, 10],
      );
    }
    process.stdout.write(
      `import ${booked.importId} (${provider}, ${from} to ${to}, ${input.pages} pages from ${input.source === 'api' ? 'the API' : 'files'}): ` +
        `${summary.keys} keys, ${summary.booked} differences booked (${displayUsd(summary.bookedUsd)}, exact ${summary.bookedUsd} USD; ` +
        `${summary.bookedTokens} tokens), unmatched: ${summary.unmatchedProviderKeys} provider keys, ${summary.unmatchedLedgerKeys} ledger keys; ` +
        `${outOfScopeRows} rows of other projects left out\n`,
    );
  });
}

const row = (k: ReconciledKey): string[] => [
  k.day,
  printable(k.model),
  k.tokenClass,
  k.serviceTier,
  k.side,
  k.providerTokens ?? '-',
  k.providerUsd === null ? '-' : displayUsd(k.providerUsd),
  k.ledgerTokens,
  displayUsd(k.ledgerUsd),
  k.entryId === null ? '-' : k.bookedTokens,
  k.entryId === null ? '-' : displayUsd(k.bookedUsd),
];
