import { isLoopbackName } from '../loopback';
import { serve, type HttpBindings } from '@hono/node-server';
import type { Client } from '@temporalio/client';
import type { PayloadCodec } from '@temporalio/common';
import { Hono, type Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { getCookie } from 'hono/cookie';
import { readFileSync } from 'node:fs';
import { timingSafeEqual } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { UserError } from '../errors';
import { sha256 } from '../hash';
import { latestRunsWithCostPerTask } from '../db/runs';
import { trackedZones } from '../reports/rollups-read';
import { chartJs } from '../reports/render-html';
import { listTasks } from '../schedules/manage-task';
import { DEFAULT_MISSED_SLOT_GRACE_MS, DEFAULT_MISSED_SLOT_WINDOW_MS, missedSlots } from '../schedules/missed-slots';
import { budgets, latestRuns, models, overview, parseMonthQuery, runPage, runView, taskBudgetPauses, userPage, users } from './admin-data';
import { parseFactor } from './anomalies';
import { freshestOf, sharedResult } from './shared-result';
import { CODEC_DECODE_PATH, CODEC_PATH, codecBodyLimit, codecCors, codecDecode } from './codec-endpoint';
import { isLoopbackHost, LoginAttempts, printablePath, Sessions } from './guards';
import { adminMetrics, DEFAULT_METRICS_CACHE_MS } from './metrics';
import {
  budgetsPage,
  errorPage,
  loginPage,
  modelsPage,
  overviewPage,
  runPageHtml,
  runsPage,
  tasksPage,
  userPageHtml,
  usersPage,
  type MissedSlotsView,
  type PageContext,
} from './pages';

/**
 * `cronledger admin`: a read-only web app over the ledger. Every page has a JSON twin under /api (money as decimal
 * strings). It binds to loopback unless given a token; with a token every request but the login form and the static
 * assets needs it (Authorization: Bearer, or the session cookie the login form sets). No route writes: the database
 * role is SELECT-only and the only POSTs are the login form and logout, which only start and end a session.
 *
 * Without a token it answers only to a loopback Host with its own port (421 otherwise), which defeats DNS rebinding.
 * With a token any Host is served (a proxy or compose names it as it likes): a rebound page has neither the bearer
 * token nor the session cookie, which the browser keeps for the admin's own host name and sends only same-site.
 */

export interface AdminOptions {
  pool: pg.Pool;
  /** For the Tasks page; without it the page says schedules are unavailable. */
  client?: Client;
  namespace: string;
  uiUrl?: string;
  token?: string;
  anomalyFactor?: string;
  /** Label charge and credit counters by user too (cardinality: one series per user). */
  metricsPerUser?: boolean;
  /** How long after its fire time a slot may stay unclaimed before it counts as missed (default 15 minutes). */
  missedSlotGraceMs?: number;
  /** How far back slots are checked (default 24 hours). */
  missedSlotWindowMs?: number;
  /** How long one missed-slot check serves every page, API call and scrape (default 30 seconds; 0: only concurrent ones). */
  missedSlotCacheMs?: number;
  /** Decrypts payloads for POST /codec/decode (Temporal's codec-server protocol); without it that route answers 503. */
  payloadCodec?: PayloadCodec;
  /** How long one listing of the schedules serves every Tasks page and /api/tasks call (default 30 seconds). */
  tasksCacheMs?: number;
  /**
   * How long a page waits for Temporal's part (the schedule listing, the missed-slot check) before it shows the last
   * one computed, or says it is still coming; the computation goes on for the next request (default 10 seconds).
   */
  temporalWaitMs?: number;
  /** How long one /metrics text serves every scrape (default 10 seconds; 0: only concurrent ones). */
  metricsCacheMs?: number;
  /** How long a login session lasts (default 12 hours). */
  sessionMs?: number;
}

/** 30 s: two Prometheus scrapes at the usual 15 s share one check, and a figure is never older than the interval. */
export const DEFAULT_MISSED_SLOT_CACHE_MS = 30_000;

/** 10 s: a page held longer by a busy Temporal server looks broken; it shows the last listing or check instead. */
export const DEFAULT_TEMPORAL_WAIT_MS = 10_000;

export const ADMIN_COOKIE = 'cronledger_admin';

export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "form-action 'self'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join('; ');

export const isLoopback = isLoopbackName;

/** Refuses a bind beyond loopback without a token, before anything listens. */
export function checkBind(host: string, token: string | undefined): void {
  if (!isLoopback(host) && !token) {
    throw new UserError(
      `refusing to serve the admin page on ${host} without a token: anyone who reaches that address could read the ledger.\n` +
        'Set CRONLEDGER_ADMIN_TOKEN to a long random secret (e.g. `openssl rand -base64 32`), or bind to 127.0.0.1 (the default).',
    );
  }
  if (token !== undefined && token.length < 16) {
    throw new UserError('CRONLEDGER_ADMIN_TOKEN is shorter than 16 characters; use a long random secret (e.g. `openssl rand -base64 32`)');
  }
}

const assetsDir = join(dirname(fileURLToPath(import.meta.url)), 'assets');
/** A Map, so a name such as `constructor` or `__proto__` is simply not an asset. */
const ASSETS = new Map<string, { type: string; body: () => string }>([
  ['admin.js', { type: 'text/javascript; charset=utf-8', body: () => readFileSync(join(assetsDir, 'admin.js'), 'utf8') }],
  ['admin.css', { type: 'text/css; charset=utf-8', body: () => readFileSync(join(assetsDir, 'admin.css'), 'utf8') }],
  ['chart.umd.min.js', { type: 'text/javascript; charset=utf-8', body: chartJs }],
]);

/** The login form's body limit: a token and its field name fit many times over. */
export const LOGIN_BODY_LIMIT = 4 * 1024;

const sameSecret = (a: string, b: string): boolean => timingSafeEqual(Buffer.from(sha256(a), 'hex'), Buffer.from(sha256(b), 'hex'));

export function createAdminApp(opts: AdminOptions): Hono<{ Bindings: HttpBindings }> {
  const app = new Hono<{ Bindings: HttpBindings }>();
  const factor = opts.anomalyFactor ?? '1.5';
  parseFactor(factor);
  const sessions = new Sessions(opts.sessionMs);
  const loginAttempts = new LoginAttempts();
  const slotCheck = {
    graceMs: opts.missedSlotGraceMs ?? DEFAULT_MISSED_SLOT_GRACE_MS,
    windowMs: opts.missedSlotWindowMs ?? DEFAULT_MISSED_SLOT_WINDOW_MS,
  };
  const client = opts.client;
  const temporalWaitMs = opts.temporalWaitMs ?? DEFAULT_TEMPORAL_WAIT_MS;
  const stillComing = (what: string) =>
    `${what} has not finished within ${temporalWaitMs / 1000} s (Temporal is answering slowly); it goes on, and a later load shows it`;
  // One check for the whole process: every page, API call and scrape within the window reads the same result, and
  // those arriving while it runs await it (each check costs Temporal calls per task).
  const sharedCheck = client
    ? sharedResult((now) => missedSlots(client, opts.pool, { ...slotCheck, now }), {
        maxAgeMs: opts.missedSlotCacheMs ?? DEFAULT_MISSED_SLOT_CACHE_MS,
      })
    : undefined;
  const metrics = adminMetrics(opts.pool, {
    perUser: opts.metricsPerUser ?? false,
    missedSlots: sharedCheck ? async () => (await sharedCheck.get()).value : undefined,
    cacheMs: opts.metricsCacheMs ?? DEFAULT_METRICS_CACHE_MS,
  });
  /** The missed-slot check for the pages: its settings and each task, or why it could not run (never fails the page). */
  const missedSlotsView = async (): Promise<MissedSlotsView> => {
    const settings = {
      graceSeconds: slotCheck.graceMs / 1000,
      windowSeconds: slotCheck.windowMs / 1000,
      cacheSeconds: (opts.missedSlotCacheMs ?? DEFAULT_MISSED_SLOT_CACHE_MS) / 1000,
    };
    const unchecked = { checkedAt: null, ageSeconds: null, tasks: [] };
    if (!sharedCheck) return { ...settings, ...unchecked, error: 'no Temporal connection' };
    try {
      const done = freshestOf(await sharedCheck.within(temporalWaitMs));
      if (!done) return { ...settings, ...unchecked, error: stillComing('the missed-slot check') };
      const { value, computedAt } = done;
      const ageSeconds = Math.max(0, Math.floor((Date.now() - computedAt.getTime()) / 1000));
      return { ...settings, error: null, checkedAt: computedAt.toISOString(), ageSeconds, tasks: value };
    } catch (err) {
      return { ...settings, ...unchecked, error: `the check failed: ${(err as Error).message}` };
    }
  };

  app.use('*', async (c, next) => {
    await next();
    c.header('Content-Security-Policy', CONTENT_SECURITY_POLICY);
    c.header('X-Content-Type-Options', 'nosniff');
    c.header('Referrer-Policy', 'no-referrer');
    c.header('X-Frame-Options', 'DENY');
    c.header('Cache-Control', 'no-store');
  });

  app.use('*', async (c, next) => {
    if (opts.token || isLoopbackHost(c.req.header('Host'), c.env?.incoming?.socket.localPort)) return next();
    return c.text(
      `421 Misdirected Request: without CRONLEDGER_ADMIN_TOKEN this page answers only to a loopback host with its port ` +
        `(open it as http://127.0.0.1:<port>/); another host name may be DNS rebinding`,
      421,
    );
  });

  // The codec endpoint's CORS, before the checks below: the Web UI's preflight carries no token.
  app.use(`${CODEC_PATH}/*`, codecCors(opts.uiUrl ? new URL(opts.uiUrl).origin : undefined));

  // Read-only: GET (and HEAD) everywhere, POST only to sign in and out and to decode payloads (which changes nothing).
  app.use('*', async (c, next) => {
    const post = c.req.method === 'POST' && ['/login', '/logout', CODEC_DECODE_PATH].includes(c.req.path);
    const ok = c.req.method === 'GET' || c.req.method === 'HEAD' || post;
    if (!ok) return c.text('the admin page is read-only', 405, { Allow: 'GET, HEAD' });
    await next();
  });

  app.use('*', async (c, next) => {
    if (!opts.token || c.req.path === '/login' || c.req.path.startsWith('/assets/')) return next();
    const bearer = /^Bearer (.+)$/.exec(c.req.header('Authorization') ?? '')?.[1];
    if ((bearer && sameSecret(bearer, opts.token)) || sessions.valid(getCookie(c, ADMIN_COOKIE))) return next();
    if (c.req.path.startsWith('/api/') || c.req.path === '/metrics' || c.req.path.startsWith(`${CODEC_PATH}/`)) {
      return c.json({ error: 'a bearer token is required (CRONLEDGER_ADMIN_TOKEN)' }, 401, { 'WWW-Authenticate': 'Bearer' });
    }
    return c.html(loginPage(), 401, { 'WWW-Authenticate': 'Bearer' });
  });

  app.get('/login', (c) => c.html(loginPage()));
  const loginBodyLimit = bodyLimit({
    maxSize: LOGIN_BODY_LIMIT,
    onError: (c) => c.text(`the login form takes at most ${LOGIN_BODY_LIMIT} bytes`, 413),
  });
  app.post('/login', loginBodyLimit, async (c) => {
    if (!opts.token) return c.redirect('/', 303);
    // Behind a proxy every client shares the proxy's address: the limit then holds for all of them together.
    const address = c.env?.incoming?.socket.remoteAddress ?? 'unknown';
    const wait = loginAttempts.retryAfterSeconds(address);
    if (wait > 0) {
      const message = `Too many wrong tokens from ${address}; try again in ${wait} seconds.`;
      return c.html(loginPage(message), 429, { 'Retry-After': String(wait) });
    }
    const form = await c.req.parseBody();
    const token = typeof form.token === 'string' ? form.token : '';
    if (!token || !sameSecret(token, opts.token)) {
      loginAttempts.fail(address);
      return c.html(loginPage('That token is not right.'), 401);
    }
    c.header('Set-Cookie', sessionCookie(c, sessions.create(), Math.floor(sessions.lifetimeMs / 1000)));
    return c.redirect('/', 303);
  });
  app.post('/logout', loginBodyLimit, (c) => {
    sessions.revoke(getCookie(c, ADMIN_COOKIE));
    c.header('Set-Cookie', sessionCookie(c, '', 0));
    return c.redirect('/login', 303);
  });

  app.get('/assets/:name', (c) => {
    const asset = ASSETS.get(c.req.param('name'));
    if (!asset) return c.text('not found', 404);
    return c.body(asset.body(), 200, { 'Content-Type': asset.type });
  });

  const workflowUrl = (workflowId: string, runId: string): string | undefined =>
    opts.uiUrl
      ? `${opts.uiUrl}/namespaces/${encodeURIComponent(opts.namespace)}/workflows/${encodeURIComponent(workflowId)}/${encodeURIComponent(runId)}/history`
      : undefined;
  const monthQuery = (c: Context) => parseMonthQuery(opts.pool, { month: c.req.query('month'), tz: c.req.query('tz') });
  const pageContext = async (c: Context): Promise<PageContext> => {
    const q = await monthQuery(c);
    return { month: q.month, zone: q.zone, zones: await trackedZones(opts.pool), workflowUrl };
  };
  const withUiUrl = <T extends { workflowId: string; runId: string }>(r: T) => ({
    ...r,
    temporalUrl: workflowUrl(r.workflowId, r.runId) ?? null,
  });

  const overviewWithSlots = async (c: Context) => {
    const [figures, slots] = await Promise.all([overview(opts.pool, await monthQuery(c), factor), missedSlotsView()]);
    return { ...figures, missedSlots: slots };
  };
  app.get('/', async (c) => c.html(overviewPage(await overviewWithSlots(c), await pageContext(c))));
  app.get('/api/overview', async (c) => c.json(await overviewWithSlots(c)));
  app.get('/api/missed-slots', async (c) => c.json(await missedSlotsView()));

  app.get('/users', async (c) => c.html(usersPage((await users(opts.pool, await monthQuery(c))).users, await pageContext(c))));
  app.get('/api/users', async (c) => c.json(await users(opts.pool, await monthQuery(c))));
  app.get('/users/:id', async (c) => {
    const id = c.req.param('id');
    return c.html(userPageHtml(await userPage(opts.pool, await monthQuery(c), id), id, await pageContext(c)));
  });
  app.get('/api/users/:id', async (c) => {
    const p = await userPage(opts.pool, await monthQuery(c), c.req.param('id'));
    return c.json({ ...p, runs: p.runs.map(withUiUrl) });
  });

  app.get('/budgets', async (c) => c.html(budgetsPage((await budgets(opts.pool, await monthQuery(c))).budgets, await pageContext(c))));
  app.get('/api/budgets', async (c) => c.json(await budgets(opts.pool, await monthQuery(c))));

  app.get('/models', async (c) =>
    c.html(modelsPage(await models(opts.pool, await monthQuery(c), c.req.query('reprice')), await pageContext(c))),
  );
  app.get('/api/models', async (c) => c.json(await models(opts.pool, await monthQuery(c), c.req.query('reprice'))));

  app.get('/runs', async (c) => c.html(runsPage((await latestRuns(opts.pool)).runs, await pageContext(c))));
  app.get('/api/runs', async (c) => c.json({ runs: (await latestRuns(opts.pool)).runs.map(withUiUrl) }));
  app.get('/runs/:workflowId', async (c) => {
    const id = c.req.param('workflowId');
    return c.html(runPageHtml(await runPage(opts.pool, id), id, await pageContext(c)));
  });
  app.get('/api/runs/:workflowId', async (c) => {
    const p = await runPage(opts.pool, c.req.param('workflowId'));
    return c.json({ ...p, run: p.run ? withUiUrl(p.run) : null });
  });

  // One listing for the whole process, like the missed-slot check: it describes every schedule (a Temporal call each).
  const sharedListing = opts.client
    ? sharedResult(() => listTasks(opts.client!, opts.pool), { maxAgeMs: opts.tasksCacheMs ?? DEFAULT_MISSED_SLOT_CACHE_MS })
    : undefined;
  const tasks = async (c: Context) => {
    if (!sharedListing) return { error: 'no Temporal connection' };
    const [listed, slots] = await Promise.all([sharedListing.within(temporalWaitMs), missedSlotsView()]);
    const done = freshestOf(listed);
    if (!done) return { error: stillComing('the listing of the schedules') };
    const listing = done.value;
    const pauses = await taskBudgetPauses(opts.pool, await monthQuery(c));
    // One query for every task's recent runs: a query per task queued 1,000 of them on the admin's 4 connections.
    const recent = await latestRunsWithCostPerTask(
      opts.pool,
      listing.map((t) => t.id),
      5,
    );
    const withRuns = listing.map((t) => ({
      ...t,
      recentRuns: (recent.get(t.id) ?? []).map(runView),
      missedSlots: slots.tasks.find((s) => s.taskId === t.id) ?? null,
      budgetPauses: pauses.get(t.id) ?? null,
    }));
    const { tasks: _perTask, ...missedSlotsChecked } = slots; // each task's check is on its row
    return { tasks: withRuns, missedSlotsChecked };
  };
  app.get('/tasks', async (c) => c.html(tasksPage(await tasks(c), await pageContext(c))));
  app.get('/api/tasks', async (c) => {
    const t = await tasks(c);
    return 'error' in t ? c.json(t, 503) : c.json(t);
  });

  app.post(CODEC_DECODE_PATH, codecBodyLimit(), codecDecode(opts.payloadCodec, Boolean(opts.token)));

  app.get('/metrics', async (c) => c.body(await metrics.render(), 200, { 'Content-Type': metrics.contentType }));

  app.notFound((c) =>
    c.req.path.startsWith('/api/') ? c.json({ error: 'not found' }, 404) : c.html(errorPage(404, 'No such page.'), 404),
  );
  app.onError((err, c) => {
    const user = err instanceof UserError;
    if (!user) process.stderr.write(`cronledger admin: ${c.req.method} ${printablePath(c.req.path)}: ${err.stack ?? err.message}\n`);
    const message = user ? err.message : 'internal error (see the server log)';
    const status = user ? 400 : 500;
    return c.req.path.startsWith('/api/') ? c.json({ error: message }, status) : c.html(errorPage(status, message), status);
  });
  return app;
}

/** The session cookie: HttpOnly, same-site only, and Secure when the page is served over https (directly or by a proxy). */
function sessionCookie(c: Context, value: string, maxAgeSeconds: number): string {
  const https = new URL(c.req.url).protocol === 'https:' || c.req.header('X-Forwarded-Proto') === 'https';
  return `${ADMIN_COOKIE}=${value}; Path=/; Max-Age=${maxAgeSeconds}; HttpOnly; SameSite=Strict${https ? '; Secure' : ''}`;
}

export interface RunningAdmin {
  url: string;
  port: number;
  close(): Promise<void>;
}

export async function startAdminServer(opts: AdminOptions & { host: string; port: number }): Promise<RunningAdmin> {
  checkBind(opts.host, opts.token);
  const app = createAdminApp(opts);
  return new Promise((resolve, reject) => {
    const server = serve({ fetch: app.fetch, hostname: opts.host, port: opts.port }, (info: AddressInfo) => {
      const host = info.family === 'IPv6' ? `[${info.address}]` : info.address;
      resolve({
        url: `http://${host}:${info.port}`,
        port: info.port,
        close: () => new Promise<void>((done) => server.close(() => done())),
      });
    });
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(err.code === 'EADDRINUSE' ? new UserError(`port ${opts.port} on ${opts.host} is taken; pass another with --port`) : err),
    );
  });
}
