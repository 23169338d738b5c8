import type pg from 'pg';
import { inject } from 'vitest';
import { startAdminServer, type RunningAdmin } from '../../src/admin/server';
import type { TestContext } from './context';

/** The admin page on a loopback port, reading as `pool` (the read-only role), with the metrics cache off. */
export const startTestAdmin = (ctx: TestContext, pool: pg.Pool): Promise<RunningAdmin> =>
  startAdminServer({
    pool,
    client: ctx.client,
    namespace: ctx.namespace,
    uiUrl: inject('stack').uiUrl,
    host: '127.0.0.1',
    port: 0,
    metricsCacheMs: 0, // tests change the ledger and scrape at once; the cache has its own test
  });
