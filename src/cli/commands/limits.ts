import type { Command } from 'commander';
import { loadRateLimitsFile } from '../../ratelimits/rate-limits-file';
import { applyRateLimits, rateLimitStatus } from '../../ratelimits/rate-limits-store';
import { withConnections } from '../connect';
import { printJson, printTable } from '../output';

/** `cronledger limits apply FILE` and `cronledger limits list`: the providers' rate limits, shared by every worker. */
export function registerLimitsCommands(program: Command): void {
  const limits = program
    .command('limits')
    .description("providers' rate limits per model (requests and tokens per minute), enforced across all workers");

  limits
    .command('apply')
    .description('make the limits of FILE the whole set (a model left out has no limit any more); workers see them within 10 s')
    .argument('<file>', 'JSON file: {"rateLimits": {"openai/gpt-4o-mini": {"requestsPerMinute": 500, "tokensPerMinute": 200000}}}')
    .option('--json', 'print JSON')
    .action(async (file: string, opts: { json?: boolean }) => {
      const parsed = loadRateLimitsFile(file); // validated before connecting
      await withConnections({ db: 'operator' }, async ({ pool }) => {
        const result = await applyRateLimits(pool, parsed);
        if (opts.json) return printJson(result);
        for (const l of result.applied) {
          process.stdout.write(`limited  ${l.model} ${l.requestsPerMinute ?? '-'} requests/min, ${l.tokensPerMinute ?? '-'} tokens/min\n`);
        }
        for (const m of result.removed) process.stdout.write(`removed  ${m}\n`);
        process.stdout.write(`${result.applied.length} limited, ${result.removed.length} removed\n`);
      });
    });

  limits
    .command('list')
    .description('every limited model, with the calls that waited for capacity and the 429s the provider gave anyway')
    .option('--json', 'print JSON (counts as decimal strings)')
    .action(async (opts: { json?: boolean }) => {
      await withConnections({ db: true }, async ({ pool }) => {
        const rows = await rateLimitStatus(pool);
        if (opts.json) return printJson(rows);
        printTable(
          ['model', 'requests/min', 'tokens/min', 'admitted', 'waited', 'waited ms', '429s'],
          rows.map((r) => [
            r.model,
            String(r.requestsPerMinute ?? '-'),
            String(r.tokensPerMinute ?? '-'),
            r.admitted,
            r.waited,
            r.waitedMs,
            r.throttled,
          ]),
          [1, 2, 3, 4, 5, 6],
        );
      });
    });
}
