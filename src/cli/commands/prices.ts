import type { Command } from 'commander';
import { applyPrices, listPrices, loadPricesFile } from '../../ledger/prices';
import { withConnections } from '../connect';
import { printJson, printTable } from '../output';

/** `cronledger prices apply FILE` and `cronledger prices list`: prices are versioned data, added and never edited. */
export function registerPricesCommands(program: Command): void {
  const prices = program.command('prices').description('versioned model prices (per million tokens, USD)');

  prices
    .command('apply')
    .description('add the price versions of FILE that the table lacks; a published version with other prices is refused')
    .argument('<file>', 'prices file, e.g. prices/standard.json')
    .option('--json', 'print JSON')
    .action(async (file: string, opts: { json?: boolean }) => {
      const parsed = loadPricesFile(file); // validated before connecting
      await withConnections({ db: true }, async ({ pool }) => {
        const result = await applyPrices(pool, parsed, file);
        if (opts.json) return printJson(result);
        for (const a of result.added) process.stdout.write(`added      ${a.model} ${a.version}\n`);
        for (const u of result.unchanged) process.stdout.write(`unchanged  ${u.model} ${u.version}\n`);
        process.stdout.write(`${result.added.length} added, ${result.unchanged.length} unchanged\n`);
      });
    });

  prices
    .command('list')
    .description('every price version, oldest first per model')
    .option('--json', 'print JSON (prices as exact decimal strings)')
    .action(async (opts: { json?: boolean }) => {
      await withConnections({ db: true }, async ({ pool }) => {
        const rows = await listPrices(pool);
        const out = rows.map((r) => ({
          model: r.model,
          version: r.version,
          effectiveFrom: r.effective_from.toISOString(),
          inputPerMillion: trim(r.input_per_million),
          cachedInputPerMillion: trim(r.cached_input_per_million),
          outputPerMillion: trim(r.output_per_million),
          embeddingInputPerMillion: trim(r.embedding_input_per_million),
          source: r.source,
        }));
        if (opts.json) return printJson({ currency: 'USD', unit: 'per_million_tokens', prices: out });
        if (out.length === 0) {
          process.stdout.write('no prices yet; add some with `cronledger prices apply prices/standard.json`\n');
          return;
        }
        printTable(
          ['MODEL', 'VERSION', 'EFFECTIVE FROM', 'INPUT/1M', 'CACHED/1M', 'OUTPUT/1M', 'EMBEDDING/1M'],
          out.map((p) => [
            p.model,
            p.version,
            p.effectiveFrom,
            p.inputPerMillion ?? '-',
            p.cachedInputPerMillion ?? '-',
            p.outputPerMillion ?? '-',
            p.embeddingInputPerMillion ?? '-',
          ]),
          [3, 4, 5, 6],
        );
      });
    });
}

/** "0.150000000000" → "0.15": the same exact value without numeric(30,12)'s padding (string work, never a float). */
function trim(value: string | null): string | null {
  if (value === null || !value.includes('.')) return value;
  return value.replace(/0+$/, '').replace(/\.$/, '');
}
