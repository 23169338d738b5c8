import type { Command } from 'commander';
import { writeFileSync } from 'node:fs';
import { UserError } from '../../errors';
import { LITELLM_FILE, readInputFile } from '../../input-file';
import { importLitellm } from '../../ledger/litellm-import';
import { applyPrices, checkPricesFile, listPrices, loadPricesFile } from '../../ledger/prices';
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
      await withConnections({ db: 'operator' }, async ({ pool }) => {
        const result = await applyPrices(pool, parsed, file);
        if (opts.json) return printJson(result);
        for (const a of result.added) process.stdout.write(`added      ${a.model} ${a.version}\n`);
        for (const u of result.unchanged) process.stdout.write(`unchanged  ${u.model} ${u.version}\n`);
        process.stdout.write(`${result.added.length} added, ${result.unchanged.length} unchanged\n`);
      });
    });

  prices
    .command('import')
    .description("turn entries of LiteLLM's model_prices_and_context_window.json into a new price version (a prices file)")
    .requiredOption('--litellm <file>', "LiteLLM's model_prices_and_context_window.json (or its _backup copy)")
    .requiredOption('--models <names>', 'LiteLLM entry names, comma-separated, e.g. claude-sonnet-4-5,gpt-4o-mini')
    .option('--version <name>', "the new version's name", `litellm-${new Date().toISOString().slice(0, 10)}`)
    .option('--effective-from <instant>', 'when the version takes effect (ISO 8601); default now')
    .option('--out <file>', 'write the prices file here instead of printing it')
    .action((opts: { litellm: string; models: string; version: string; effectiveFrom?: string; out?: string }) => {
      const models = opts.models
        .split(',')
        .map((m) => m.trim())
        .filter((m) => m !== '');
      if (models.length === 0)
        throw new UserError('--models names no model; give LiteLLM entry names, e.g. --models claude-sonnet-4-5,gpt-4o-mini');
      const effectiveFrom = opts.effectiveFrom ?? `${new Date().toISOString().slice(0, 19)}Z`;
      const text = readInputFile(opts.litellm, LITELLM_FILE);
      const { file, leftOut } = importLitellm(text, opts.litellm, models, { version: opts.version, effectiveFrom });
      const checked = checkPricesFile(file, `imported from ${opts.litellm}`); // exactly what \`prices apply\` accepts
      const json = `${JSON.stringify(checked, null, 2)}\n`;
      if (opts.out) writeOnce(opts.out, json);
      else process.stdout.write(json);
      for (const l of leftOut) process.stderr.write(`left out (not a token rate): ${l}\n`);
      if (opts.out)
        process.stderr.write(`wrote ${opts.out}: ${models.length} models; apply it with \`cronledger prices apply ${opts.out}\`\n`);
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

/** Writes a new file; one already there is left alone (a prices file is history once applied). */
function writeOnce(path: string, content: string): void {
  try {
    writeFileSync(path, content, { flag: 'wx' });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new UserError(
      `cannot write ${path}: ${code === 'EEXIST' ? 'it exists already; give a new --out file' : (code ?? (err as Error).message)}`,
    );
  }
}
