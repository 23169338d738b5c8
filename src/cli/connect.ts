import type { Client } from '@temporalio/client';
import type pg from 'pg';
import { resolveConnections, resolveOperatorDatabaseUrl, type Connections } from '../config';
import { connectPool } from '../db/pool';
import { UserError } from '../errors';

/**
 * Runs a command body with the connections it asks for and always closes them, so the CLI exits promptly.
 * A stack that is down becomes a UserError with the fix instead of a gRPC stack trace. `db: 'operator'`: the pool is
 * the operator role's (DATABASE_OPERATOR_URL), for the commands that write money, prices, budgets and task versions;
 * otherwise the worker role's (DATABASE_URL).
 */
export async function withConnections<T>(
  needs: { temporal?: boolean; db?: boolean | 'operator' },
  body: (c: { conn: Connections; client: Client; pool: pg.Pool }) => Promise<T>,
): Promise<T> {
  const conn = resolveConnections(process.env, { temporal: needs.temporal, db: needs.db === true });
  let client: Client | undefined;
  let pool: pg.Pool | undefined;
  try {
    if (needs.temporal) {
      try {
        // imported here: the Temporal client's modules are a good part of a command's start-up, and a command that
        // reads only the database never needs them
        const { connectClient } = await import('../client');
        client = await connectClient(conn);
      } catch (err) {
        throw new UserError(
          `cannot reach Temporal at ${conn.temporalAddress} (${(err as Error).message}); start it with \`npx cronledger dev up\` ` +
            'or fix TEMPORAL_ADDRESS (host:port, e.g. 127.0.0.1:7233)',
        );
      }
    }
    if (needs.db === 'operator') pool = await connectPool(resolveOperatorDatabaseUrl(), 'DATABASE_OPERATOR_URL', 4);
    else if (needs.db) pool = await connectPool(conn.databaseUrl, 'DATABASE_URL', 4);
    return await body({ conn, client: client as Client, pool: pool as pg.Pool });
  } finally {
    await client?.connection.close();
    await pool?.end();
  }
}
