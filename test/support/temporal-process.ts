import { Connection } from '@temporalio/client';
import { SEARCH_ATTRIBUTES } from '../../src/constants';
import { freePort } from '../../src/dev/ports';
import { devServerTuningArgs } from '../../src/dev/temporal-server';
import { KillableProcess } from './killable-process';

/**
 * A private Temporal dev server process for a scenario that kills the server: its own SQLite file and port, so the
 * suite's shared server never goes down. kill() is SIGKILL (no clean close of SQLite), start() brings it back on the
 * same file and port.
 */
export class TemporalProcess extends KillableProcess {
  readonly address: string;

  private constructor(private readonly opts: { cli: string; dbFilename: string; port: number; namespaces: string[]; logFile: string }) {
    super();
    this.address = `127.0.0.1:${opts.port}`;
  }

  /** cli: absolute path of the built temporal binary (inject('stack').temporalCli). */
  static async create(opts: { cli: string; dbFilename: string; namespaces: string[]; logFile: string }): Promise<TemporalProcess> {
    return new TemporalProcess({ ...opts, port: await freePort() });
  }

  /** Starts the server and waits until it serves every namespace. */
  async start(): Promise<void> {
    if (this.running) throw new Error(`the Temporal server on ${this.address} is already running`);
    const { cli, dbFilename, port, namespaces, logFile } = this.opts;
    const args = [
      'server',
      'start-dev',
      '--headless',
      '--db-filename',
      dbFilename,
      // the same SQLite pragmas and schedule start rate as `dev up`, so restarts are tested on what users run
      ...devServerTuningArgs(),
      '--ip',
      '127.0.0.1',
      '--port',
      String(port),
      ...Object.values(SEARCH_ATTRIBUTES).flatMap((name) => ['--search-attribute', `${name}=Keyword`]),
      ...namespaces.flatMap((n) => ['--namespace', n]),
      '--log-level',
      'error',
    ];
    this.spawnLogged(cli, args, { logFile });
    await this.waitUntilServing();
  }

  /** SIGKILL (SQLite is not closed cleanly), and wait for the process to be gone. Returns the kill time. */
  kill(): Promise<number> {
    return this.sigkill();
  }

  /** SIGTERM (clean shutdown), SIGKILL after 20 s. */
  stop(): Promise<void> {
    return this.terminate(20_000);
  }

  private async waitUntilServing(): Promise<void> {
    const deadline = Date.now() + 90_000;
    let last = 'not reachable yet';
    while (Date.now() < deadline) {
      if (!this.running) throw new Error(`the Temporal server exited while starting; see ${this.opts.logFile}`);
      let connection: Connection | undefined;
      try {
        connection = await Connection.connect({ address: this.address, connectTimeout: '2s' });
        for (const namespace of ['default', ...this.opts.namespaces]) {
          await connection.withDeadline(Date.now() + 2_000, () => connection!.workflowService.describeNamespace({ namespace }));
        }
        return;
      } catch (err) {
        last = err instanceof Error ? err.message : String(err);
      } finally {
        await connection?.close().catch(() => undefined);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    throw new Error(`the Temporal server on ${this.address} did not serve within 90 s (${last}); see ${this.opts.logFile}`);
  }
}
