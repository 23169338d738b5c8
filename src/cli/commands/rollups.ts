import type { Command } from 'commander';
import { parseMonth } from '../../reports/month';
import { parseTimeZone } from '../../time-zone';
import { builtMonths, pendingEntries, readWatermark, trackedZones } from '../../reports/rollups-read';
import { rebuildAll, rebuildMonth, rebuildQueueSummary, refreshRollups, type RebuildResult } from '../../reports/rollups-write';
import { withConnections } from '../connect';
import { printJson, printTable } from '../output';
import { terminalProgress } from '../../reports/terminal-progress';
import { verifyRollups } from '../../reports/rollups-verify';

export function registerRollupsCommands(program: Command): void {
  const rollups = program.command('rollups').description('daily usage rollups: derived from the ledger, rebuildable at any time');

  rollups
    .command('rebuild')
    .description('recompute rollups from the raw ledger, deterministically (a month, or every month)')
    .option('--month <YYYY-MM>', 'only this month')
    .option('--tz <zone>', 'only this time zone (default: every zone rolled up so far)')
    .option('--json', 'print JSON')
    .action(async (opts: { month?: string; tz?: string; json?: boolean }) => {
      const month = opts.month === undefined ? undefined : parseMonth(opts.month);
      const zone = opts.tz === undefined ? undefined : parseTimeZone(opts.tz);
      await withConnections({ db: true }, async ({ pool }) => {
        const zones = zone ? [zone] : await trackedZones(pool);
        const results: RebuildResult[] = [];
        for (const z of zones) {
          const progress = terminalProgress(0);
          try {
            if (month) results.push(await rebuildMonth(pool, z, month, progress.update));
            else results.push(...(await rebuildAll(pool, z, progress.update)));
          } finally {
            progress.finish();
          }
        }
        await rebuildQueueSummary(pool);
        if (opts.json) return printJson({ rebuilt: results });
        printTable(
          ['ZONE', 'MONTH', 'BUCKETS', 'ENTRIES'],
          results.map((r) => [r.zone, r.month, String(r.buckets), r.entries]),
          [2, 3],
        );
      });
    });

  rollups
    .command('status')
    .description('per zone: the watermark (last refresh, highest entry folded in) and entries waiting to be folded in')
    .option('--refresh', 'fold waiting entries in first')
    .option('--json', 'print JSON')
    .action(async (opts: { refresh?: boolean; json?: boolean }) => {
      await withConnections({ db: true }, async ({ pool }) => {
        if (opts.refresh) await refreshRollups(pool);
        const zones = await trackedZones(pool);
        // one queue for every zone: an entry waits until a refresh folds it into all of them
        const pending = String(await pendingEntries(pool));
        const rows = [];
        for (const z of zones) {
          rows.push({ ...(await readWatermark(pool, z)), pending, months: await builtMonths(pool, z) });
        }
        if (opts.json) return printJson({ zones: rows });
        printTable(
          ['ZONE', 'REFRESHED', 'LAST ENTRY', 'FOLDED', 'PENDING', 'MONTHS'],
          rows.map((r) => [r.zone, r.refreshedAt ?? '-', r.lastEntryId, r.entriesFolded, r.pending, r.months.join(' ') || '-']),
          [2, 3, 4],
        );
      });
    });

  rollups
    .command('verify')
    .description(
      'compare every rollup of every built month with the raw ledger; print each difference, exit 1 on any (recorded for the admin page)',
    )
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }) => {
      await withConnections({ db: true }, async ({ pool }) => {
        const r = await verifyRollups(pool);
        if (r.differences.length > 0) process.exitCode = 1;
        if (opts.json) return printJson(r);
        for (const d of r.differences) {
          const from = d.side === 'ledger' ? 'ledger gives, rollup lacks' : 'rollup holds, ledger lacks';
          process.stdout.write(`${d.table} ${d.zone} ${d.month} ${from}: ${JSON.stringify(d.row)}\n`);
        }
        process.stdout.write(
          `${r.differences.length === 0 ? 'rollups match the ledger' : `${r.differences.length} difference(s)`}: ` +
            `${r.months} month(s), ${r.rowsChecked} rollup row(s) checked\n`,
        );
      });
    });
}
