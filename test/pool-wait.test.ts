import { createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createPool, createWorkerPool } from '../src/db/pool';
import { createTestContext, type TestContext } from './support/context';

/**
 * The pool's two waits are different things: connecting to a server that never answers must fail after the connect
 * timeout, while a query queued behind a busy pool's only connection must wait its turn, however long that takes.
 * The connect timeout here is 200 ms; the queued query waits 1.5 s, well past it. The worker's pool keeps an idle
 * connection past node-postgres's 10 s default, so that a worker keeps its sessions from one minute's slots to the next.
 */
const CONNECT_TIMEOUT_MS = 200;

let ctx: TestContext;
let silent: Server;
const sockets: Socket[] = [];

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  silent = createServer((s) => void sockets.push(s));
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
});

afterAll(async () => {
  for (const s of sockets) s.destroy();
  await new Promise((r) => silent?.close(r));
  await ctx?.close();
});

it('a query waiting for a busy pool connection longer than the connect timeout still runs', async () => {
  const pool = createPool(ctx.databaseUrl, 1, CONNECT_TIMEOUT_MS);
  const held = await pool.connect();
  let released = false;
  const release = () => {
    if (!released) held.release();
    released = true;
  };
  try {
    // settled either way, so a failure is an assertion below and not an unhandled rejection
    const queued = pool.query<{ answer: number }>('select 42 as answer').then(
      (r) => r.rows,
      (err: Error) => err.message,
    );
    await new Promise((r) => setTimeout(r, CONNECT_TIMEOUT_MS * 7.5));
    expect(pool.waitingCount, 'the query still waits its turn').toBe(1);
    release();
    expect(await queued).toEqual([{ answer: 42 }]);
  } finally {
    release();
    await pool.end();
  }
});

it('a server that never answers still fails the connection after the connect timeout', async () => {
  const port = (silent.address() as { port: number }).port;
  const pool = createPool(`postgres://app:pw@127.0.0.1:${port}/cronledger`, 1, CONNECT_TIMEOUT_MS);
  try {
    await expect(pool.query('select 1')).rejects.toThrow(/timeout/i);
  } finally {
    await pool.end();
  }
});

it("the worker's pool keeps an idle connection past node-postgres's 10 s default", async () => {
  const pool = createWorkerPool(ctx.databaseUrl);
  const backend = async () => (await pool.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0].pid;
  try {
    const first = await backend();
    await new Promise((r) => setTimeout(r, 11_000));
    expect(pool.totalCount, 'the idle connection is still open').toBe(1);
    expect(await backend(), 'the same session answers').toBe(first);
  } finally {
    await pool.end();
  }
}, 30_000);
