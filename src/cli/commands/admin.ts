import type { Client } from '@temporalio/client';
import { Option, type Command } from 'commander';
import { connectClient } from '../../client';
import { readStackFile, resolveConnections, secretSetting } from '../../config';
import { startAdminServer } from '../../admin/server';
import { parseFactor } from '../../admin/anomalies';
import { connectPool, readOnlySessionUrl } from '../../db/pool';
import { databaseUrlFor } from '../../dev/postgres';
import { UserError } from '../../errors';
import { EncryptionCodec, payloadKeysFromEnv } from '../../payload-codec';
import { parseDuration } from '../../tasks/duration';
import { parseCount } from '../options';

interface AdminCommandOptions {
  port: string;
  host: string;
  anomalyFactor: string;
  metricsPerUser?: boolean;
  missedSlotGrace: string;
  missedSlotWindow: string;
  missedSlotCache: string;
  temporalWait: string;
}

/**
 * `cronledger admin`: serves the read-only admin page until stopped. The database role is the SELECT-only
 * cronledger_readonly (CRONLEDGER_ADMIN_DATABASE_URL, else the local stack's), and every session is read-only
 * besides, so even a role with more rights writes nothing through it.
 */
export function registerAdminCommand(program: Command): void {
  program
    .command('admin')
    .description('serve the read-only admin page (spend, runs, users, models, tasks, anomalies) and /metrics')
    .option('--port <n>', 'port to listen on (0: any free port)', '8234')
    .option('--host <address>', 'address to bind; anything but loopback requires CRONLEDGER_ADMIN_TOKEN', '127.0.0.1')
    .option('--anomaly-factor <x>', 'flag cost per run above this many times its trailing 7-day median', '1.5')
    .option('--metrics-per-user', 'label the /metrics cost counters by user too (one series per user)')
    .option('--missed-slot-grace <duration>', 'a slot still unclaimed this long after it should have fired counts as missed', '15m')
    .option('--missed-slot-window <duration>', 'how far back slots are checked for claims', '24h')
    .option(
      '--missed-slot-cache <duration>',
      'how long one missed-slot check serves every page, API call and scrape (0s: only those arriving while it runs)',
      '30s',
    )
    .option(
      '--temporal-wait <duration>',
      'how long a page waits for the schedule listing or the missed-slot check before it shows the last one (they go on)',
      '10s',
    )
    // `dev up` ties the process it starts to its data dir with this marker, as it does its workers.
    .addOption(new Option('--stack-marker <dir>').hideHelp())
    .action(async (opts: AdminCommandOptions) => {
      const port = opts.port === '0' ? 0 : parseCount('--port', opts.port, 65_535);
      const missedSlotGraceMs = durationOption('--missed-slot-grace', opts.missedSlotGrace);
      const missedSlotWindowMs = durationOption('--missed-slot-window', opts.missedSlotWindow);
      const missedSlotCacheMs = durationOption('--missed-slot-cache', opts.missedSlotCache);
      const temporalWaitMs = durationOption('--temporal-wait', opts.temporalWait);
      if (temporalWaitMs === 0) throw new UserError('--temporal-wait 0 would never show a fresh listing; give a duration such as 10s');
      if (missedSlotWindowMs === 0) throw new UserError('--missed-slot-window 0 checks nothing; give a duration such as 24h');
      try {
        parseFactor(opts.anomalyFactor);
      } catch {
        throw new UserError(`--anomaly-factor ${JSON.stringify(opts.anomalyFactor)} is not a decimal such as 1.5`);
      }
      const token = secretSetting('CRONLEDGER_ADMIN_TOKEN');
      const payloadKeys = payloadKeysFromEnv();
      const { url: databaseUrl, variable } = adminDatabaseUrl();
      const pool = await connectPool(readOnlySessionUrl(databaseUrl), variable, 4);
      const conn = resolveConnections(process.env, { db: false });
      let client: Client | undefined;
      if (conn.temporalAddress) {
        client = await connectClient(conn).catch((err: Error) => {
          process.stderr.write(
            `cronledger admin: Temporal at ${conn.temporalAddress} not reachable (${err.message}); the Tasks page stays empty\n`,
          );
          return undefined;
        });
      }
      try {
        const server = await startAdminServer({
          pool,
          client,
          namespace: conn.namespace,
          uiUrl: conn.uiUrl,
          token,
          host: opts.host,
          port,
          anomalyFactor: opts.anomalyFactor,
          metricsPerUser: opts.metricsPerUser ?? process.env.CRONLEDGER_METRICS_PER_USER === '1',
          missedSlotGraceMs,
          missedSlotWindowMs,
          missedSlotCacheMs,
          temporalWaitMs,
          payloadCodec: payloadKeys && new EncryptionCodec(payloadKeys),
        });
        process.stdout.write(`cronledger admin on ${server.url}${token ? ' (token required)' : ''}\n`);
        await new Promise<void>((resolve) => {
          process.once('SIGINT', resolve);
          process.once('SIGTERM', resolve);
        });
        await server.close();
      } finally {
        await client?.connection.close();
        await pool.end();
      }
    });
}

function durationOption(flag: string, value: string): number {
  const ms = parseDuration(value);
  if (ms === undefined)
    throw new UserError(`${flag} ${JSON.stringify(value)} is not a duration; use hours, minutes and seconds such as 15m, 1h30m or 90s`);
  return ms;
}

/** CRONLEDGER_ADMIN_DATABASE_URL, else the local stack's read-only role; never the application role silently. */
function adminDatabaseUrl(): { url: string; variable: string } {
  const url = secretSetting('CRONLEDGER_ADMIN_DATABASE_URL');
  if (url) return { url, variable: 'CRONLEDGER_ADMIN_DATABASE_URL' };
  const stack = readStackFile();
  const pgStack = stack?.postgres;
  if (!secretSetting('DATABASE_URL') && pgStack && !pgStack.external && pgStack.passwords?.readonly) {
    return { url: databaseUrlFor(pgStack.port, 'readonly', pgStack.passwords), variable: 'the stack file' };
  }
  throw new UserError(
    'CRONLEDGER_ADMIN_DATABASE_URL is not set: the admin page connects as the SELECT-only role cronledger_readonly.\n' +
      'Set CRONLEDGER_ADMIN_DATABASE_URL=postgres://cronledger_readonly:<password>@host:5432/<database> (docs/production.md, "Database roles"), or run `npx cronledger dev up`.',
  );
}
