import type { Command } from 'commander';
import { dataDir, redactDatabaseUrl, secretSetting, TEMPORAL_SERVICES, temporalTlsEnv, type TemporalMode } from '../../config';
import { BUDGET_SWEEP_SCHEDULE_ID, DEFAULT_TASK_QUEUE } from '../../constants';
import { ensurePostgresBinDir } from '../../dev/postgres';
import { requireStackFile } from '../../dev/stack-file';
import { stackStatus, startStack, stopStack, type StackStatus } from '../../dev/stack';
import { resolveTemporalCli } from '../../dev/temporal-cli';
import { resolveTemporalServerBinaries } from '../../dev/temporal-server-binaries';
import { UserError } from '../../errors';
import { BUDGET_SWEEP_EVERY, ensureBudgetSweepSchedule } from '../../schedules/budget-sweep-schedule';
import { withConnections } from '../connect';
import { printJson, printTable } from '../output';

const DEFAULT_WORKERS = 2;
const MAX_WORKERS = 32;

export function registerDevCommands(program: Command): void {
  const dev = program.command('dev').description('start, stop and inspect the local stack (Temporal with its Web UI, PostgreSQL, workers)');

  dev
    .command('up')
    .description('start the local stack in CRONLEDGER_DATA_DIR (default .cronledger/); parts already running are left running')
    .option('--workers <n>', `worker processes to run (0-${MAX_WORKERS})`, String(DEFAULT_WORKERS))
    .option(
      '--temporal <mode>',
      '`dev`: the Temporal dev server on SQLite; `server`: the Temporal server (frontend, history, matching, worker) on PostgreSQL. ' +
        'Default: what the stack ran last, else dev',
    )
    .action(async (opts: { workers: string; temporal?: string }) => {
      const workers = parseWorkerCount(opts.workers);
      const temporal = opts.temporal === undefined ? undefined : parseTemporalMode(opts.temporal);
      const dir = dataDir();
      const up = await startStack({
        temporal,
        dataDir: dir,
        workers,
        externalDatabaseUrl: secretSetting('DATABASE_URL'),
        externalOwnerDatabaseUrl: secretSetting('DATABASE_OWNER_URL'),
        taskQueue: process.env.CRONLEDGER_TASK_QUEUE ?? DEFAULT_TASK_QUEUE,
      });
      // The sweeper of budget reservations and events runs whether or not a tasks file was ever applied.
      const sweep = await withConnections({ temporal: true }, ({ client }) =>
        ensureBudgetSweepSchedule(client, { taskQueue: up.taskQueue }),
      );
      const state = (alreadyRunning: boolean, pid?: number) =>
        `${alreadyRunning ? 'already running' : 'started'}${pid ? `, pid ${pid}` : ''}`;
      const lines = [
        up.temporal.mode === 'server'
          ? `Temporal     ${up.stack.temporal.address}  (server on PostgreSQL, ${up.temporal.alreadyRunning ? 'already running' : 'started'}: ` +
            `${[...TEMPORAL_SERVICES, 'ui']
              .filter((part) => up.temporal.pids?.[part])
              .map((part) => `${part} ${up.temporal.pids![part]}`)
              .join(', ')})`
          : `Temporal     ${up.stack.temporal.address}  (${state(up.temporal.alreadyRunning, up.temporal.pid)})`,
        `Web UI       ${up.stack.temporal.uiUrl}`,
        `Admin page   ${'skipped' in up.admin ? `not started: ${up.admin.skipped}` : `${up.admin.url}  (${state(up.admin.alreadyRunning, up.admin.pid)})`}`,
        `PostgreSQL   ${redactDatabaseUrl(up.stack.postgres.databaseUrl)}  (${up.postgres.external ? 'external, from DATABASE_URL' : state(up.postgres.alreadyRunning, up.postgres.pid)})`,
        `Migrations   ${
          up.migrationsApplied === null
            ? 'not run: set DATABASE_OWNER_URL (the owner role) to migrate, or run `cronledger db migrate` with it'
            : up.migrationsApplied.length
              ? `applied ${up.migrationsApplied.join(', ')}`
              : 'up to date'
        }`,
        `Workers      ${up.workers.length ? up.workers.map((w) => `${w.id} (${state(w.alreadyRunning, w.pid)})`).join(', ') : 'none'}` +
          (up.workers.length ? ` on task queue ${up.taskQueue}` : ''),
        `Budget sweep schedule ${BUDGET_SWEEP_SCHEDULE_ID}, every ${BUDGET_SWEEP_EVERY} (${sweep})`,
        `Data dir     ${dir} (logs in ${dir}/logs)`,
        '',
        'Every cronledger command in this checkout finds this stack through the data dir. Elsewhere (psql too):',
        '  eval "$(npx cronledger dev env)"    # prints the passwords: the one command that does',
      ];
      const extra = up.workers.length - workers;
      if (extra > 0) lines.push(`Note: ${extra} worker(s) beyond --workers ${workers} are still running; \`dev down\` stops them.`);
      process.stdout.write(`${lines.join('\n')}\n`);
    });

  dev
    .command('down')
    .description('stop the workers, Temporal and PostgreSQL of the local stack (data and ports are kept for the next `dev up`)')
    .action(async () => {
      const dir = dataDir();
      const down = await stopStack(dir);
      if (!down.found) {
        process.stdout.write(`no stack in ${dir}; nothing to stop\n`);
        return;
      }
      const stopped = [
        ...down.workers.map((w) => `${w.id} (pid ${w.pid})`),
        ...(down.adminPid ? [`admin page (pid ${down.adminPid})`] : []),
        ...(down.temporalPid ? [`Temporal (pid ${down.temporalPid})`] : []),
        ...(down.temporalServerPids.length ? [`Temporal server (pids ${down.temporalServerPids.join(', ')})`] : []),
        ...(down.postgresPid ? [`PostgreSQL (pid ${down.postgresPid})`] : []),
      ];
      process.stdout.write(stopped.length ? `stopped ${stopped.join(', ')}\n` : `nothing was running in ${dir}\n`);
    });

  dev
    .command('status')
    .description('show each part of the local stack: running or not, pid, address')
    .option('--json', 'machine-readable output')
    .action(async (opts: { json?: boolean }) => {
      const status = await stackStatus(dataDir());
      if (opts.json) printJson(status);
      else printStatus(status);
    });

  dev
    .command('env')
    .description(
      'print shell export lines for this stack (TEMPORAL_ADDRESS, DATABASE_URL, DATABASE_OPERATOR_URL, DATABASE_OWNER_URL) WITH passwords: eval "$(npx cronledger dev env)"',
    )
    .action(() => {
      const dir = dataDir();
      const stack = requireStackFile(dir);
      const quote = (v: string) => `'${v.replaceAll("'", "'\\''")}'`;
      const lines = [
        `# cronledger stack in ${dir}: these lines hold passwords; do not paste them into logs or tickets`,
        `export TEMPORAL_ADDRESS=${quote(stack.temporal.address)}`,
        `export TEMPORAL_NAMESPACE=${quote(stack.namespace)}`,
        // server mode: the client certificate, for cronledger and the temporal CLI alike (both read TEMPORAL_TLS_*)
        ...Object.entries(temporalTlsEnv(stack.temporal.tls)).map(([k, v]) => `export ${k}=${quote(v)}`),
        `export DATABASE_URL=${quote(stack.postgres.databaseUrl)}`,
        stack.postgres.operatorDatabaseUrl
          ? `export DATABASE_OPERATOR_URL=${quote(stack.postgres.operatorDatabaseUrl)}`
          : '# DATABASE_OPERATOR_URL: as you set it (external database)',
        stack.postgres.ownerDatabaseUrl
          ? `export DATABASE_OWNER_URL=${quote(stack.postgres.ownerDatabaseUrl)}`
          : '# DATABASE_OWNER_URL: as you set it (external database)',
      ];
      process.stdout.write(`${lines.join('\n')}\n`);
    });

  dev
    .command('install')
    .description('install what `dev up` needs (the temporal CLI, PostgreSQL) without starting anything')
    .option('--temporal-server', 'also build what `dev up --temporal server` runs: the Temporal server, its schema tool, the Web UI server')
    .action(async (opts: { temporalServer?: boolean }) => {
      const cli = await resolveTemporalCli();
      const lines = [`temporal CLI     ${cli.path} (from ${cli.source})`];
      if (opts.temporalServer) {
        const b = await resolveTemporalServerBinaries();
        lines.push(`Temporal server  ${b.server}`, `schema tool      ${b.sqlTool}`, `Web UI server    ${b.ui}`);
      }
      const pgBin = await ensurePostgresBinDir((line) => process.stderr.write(`${line}\n`));
      lines.push(`PostgreSQL       ${pgBin}`);
      process.stdout.write(`${lines.join('\n')}\n`);
    });
}

export function parseTemporalMode(value: string): TemporalMode {
  if (value === 'dev' || value === 'server') return value;
  throw new UserError(
    `--temporal ${JSON.stringify(value)} is not a Temporal mode; use --temporal dev (the dev server on SQLite) or --temporal server (the Temporal server on PostgreSQL)`,
  );
}

export function parseWorkerCount(value: string): number {
  if (!/^\d+$/.test(value.trim()) || Number(value) > MAX_WORKERS) {
    throw new UserError(
      `--workers ${JSON.stringify(value)} is not a worker count; use a whole number from 0 to ${MAX_WORKERS}, e.g. --workers 3`,
    );
  }
  return Number(value);
}

function printStatus(s: StackStatus): void {
  if (!s.exists) {
    process.stdout.write(`no stack in ${s.dataDir}; start one with \`npx cronledger dev up\`\n`);
    return;
  }
  const state = (running: boolean) => (running ? 'running' : 'stopped');
  const temporalRows =
    s.temporal.mode === 'server'
      ? s.temporal.services.map((p) => [
          p.name === 'ui' ? 'Web UI' : `Temporal ${p.name}`,
          state(p.running),
          String(p.pid ?? '-'),
          [p.name === 'ui' ? (s.uiUrl ?? '-') : p.name === 'frontend' ? `${s.temporalAddress ?? '-'}, log ${p.log}` : p.log]
            .concat(p.metricsUrl ? [`metrics ${p.metricsUrl}`] : [])
            .join(', '),
        ])
      : [
          ['Temporal', state(s.temporal.running), String(s.temporal.pid ?? '-'), s.temporalAddress ?? '-'],
          ['Web UI', state(s.temporal.running), String(s.temporal.pid ?? '-'), s.uiUrl ?? '-'],
        ];
  const rows = [
    ...temporalRows,
    ['Admin page', state(s.admin.running), String(s.admin.pid ?? '-'), s.adminUrl ?? '-'],
    [
      'PostgreSQL',
      s.postgres.external ? `${state(s.postgres.running)} (external)` : state(s.postgres.running),
      String(s.postgres.pid ?? '-'),
      s.databaseUrl ?? '-',
    ],
    ...s.workers.map((w) => [w.id, state(w.running), String(w.pid), `${w.log}${w.metricsUrl ? `, metrics ${w.metricsUrl}` : ''}`]),
  ];
  printTable(['part', 'state', 'pid', 'where'], rows);
  const mode = s.temporal.mode === 'server' ? 'Temporal server on PostgreSQL (--temporal server)' : 'Temporal dev server (--temporal dev)';
  process.stdout.write(`\n${mode}; data dir ${s.dataDir}, temporal CLI ${s.temporalCli ?? 'not installed'}\n`);
}
