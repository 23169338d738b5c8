import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { migrateDatabase } from '../../src/db/migrate';
import { generatePasswords, type RolePasswords } from '../../src/db/roles';
import { freePort } from '../../src/dev/ports';
import { crashPostgres, databaseUrlFor, startPostgres, stopPostgres } from '../../src/dev/postgres';

/**
 * A private PostgreSQL cluster for a scenario that stops the database: the dev stack's own cluster code (pg_ctl as
 * the postgres user when root), in its own folder and port, so the suite's shared cluster never goes down.
 */
export class PrivatePostgres {
  private constructor(
    private readonly dataDir: string,
    readonly port: number,
    private readonly passwords: RolePasswords,
    /** The migrated ledger database, `cronledger`, as the worker role (what workers use). */
    readonly databaseUrl: string,
  ) {}

  /** The same database as the owner role (what tests write or lock directly). */
  get ownerDatabaseUrl(): string {
    return databaseUrlFor(this.port, 'owner', this.passwords);
  }

  /** The same database as the operator role (prices, budgets, credits). */
  get operatorDatabaseUrl(): string {
    return databaseUrlFor(this.port, 'operator', this.passwords);
  }

  /** Creates the cluster in dataDir/postgres, starts it, and migrates the ledger database (as the owner role). */
  static async create(dataDir: string): Promise<PrivatePostgres> {
    mkdirSync(join(dataDir, 'logs'), { recursive: true });
    const port = await freePort();
    const passwords = generatePasswords();
    const started = await startPostgres({ dataDir, port, passwords, log: () => undefined });
    await migrateDatabase(databaseUrlFor(port, 'owner', passwords));
    return new PrivatePostgres(dataDir, port, passwords, started.databaseUrl);
  }

  /** Fast shutdown: every client is disconnected and nothing answers until start(). Returns when it is down. */
  async stop(): Promise<number> {
    const at = Date.now();
    await stopPostgres(this.dataDir);
    return at;
  }

  /** Immediate shutdown (a crash for the database: what is only in the WAL buffers is lost). Returns when it is down. */
  async crash(): Promise<void> {
    await crashPostgres(this.dataDir);
  }

  /** Server settings (ALTER SYSTEM, as the superuser), in force after a reload and kept across restarts. */
  async configure(settings: Record<string, string>): Promise<void> {
    const client = new pg.Client({ connectionString: databaseUrlFor(this.port, 'superuser', this.passwords, 'postgres') });
    await client.connect();
    try {
      for (const [name, value] of Object.entries(settings)) await client.query(`alter system set ${name} = ${client.escapeLiteral(value)}`);
      await client.query('select pg_reload_conf()');
    } finally {
      await client.end();
    }
  }

  /** Starts the cluster again on the same port (the clients' URLs stay valid). */
  async start(): Promise<void> {
    await startPostgres({ dataDir: this.dataDir, port: this.port, passwords: this.passwords, log: () => undefined });
  }

  /** Stops the cluster for good (the caller removes dataDir). */
  async destroy(): Promise<void> {
    await stopPostgres(this.dataDir);
  }

  /** Whether the server accepts a connection right now. */
  async reachable(): Promise<boolean> {
    const client = new pg.Client({ connectionString: this.databaseUrl, connectionTimeoutMillis: 2_000 });
    try {
      await client.connect();
      return true;
    } catch {
      return false;
    } finally {
      await client.end().catch(() => undefined);
    }
  }
}
