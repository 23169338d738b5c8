import { once } from 'node:events';
import { appendFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type pg from 'pg';
import { encode, encodeChat } from 'gpt-tokenizer/model/gpt-4o-mini';
import { billingGroups, costAtto, dayOf, daysOf, decimalText, pageOf, rawNumber, sendJson } from './fake-billing';

/**
 * A local stand-in for the OpenAI HTTP API (the only thing tests stand in for): /v1/chat/completions and
 * /v1/embeddings on 127.0.0.1, answering from a per-endpoint script and recording every request it saw.
 * When a script runs out, the endpoint's default reply is used (ok with default usage).
 *
 * Like the real API it bills a request when it generates the reply, whether or not the caller is still there to read
 * it, and it keeps its own log of billed requests (ID, usage, caller, time), independent of the ledger: the
 * fault-injection tests reconcile the two. A caller names itself through its base URL (baseURLFor), so a billed
 * request can be traced to the worker process that sent it.
 *
 * From that log it also serves the organization's admin reports, as OpenAI does to an admin key: the Usage API
 * (/v1/organization/usage/completions and /embeddings, daily buckets by model, project, API key, batch and tier) and
 * the Costs API (/v1/organization/costs, daily buckets by line item and project, priced at its own billing rates),
 * paged `adminPageSize` buckets at a time. A test plants drift: a billed request nobody received (plantBilled), a
 * billing rate other than cronledger's price (setBillingRates), a request reported late (reportLate, releaseLate).
 */

export interface FakeUsage {
  prompt_tokens: number;
  completion_tokens?: number;
  cached_tokens?: number;
  /** Sent as prompt_tokens_details.cache_write_tokens (prompt tokens written to the cache, as newer models report). */
  cache_write_tokens?: number;
  reasoning_tokens?: number;
  /** Sent as the reply's service_tier (the tier that served it); left out when not given. */
  service_tier?: string;
}

export type FakeReply =
  /** 200 with a normal reply and this usage (omit usage to send none); `vector` is the embedding (default 4 numbers). */
  | { kind: 'ok'; usage?: FakeUsage | null; text?: string; model?: string; vector?: number[] }
  /** 200, usage present, but no choices (chat) / no data (embeddings): billed yet unusable. */
  | { kind: 'empty'; usage: FakeUsage; model?: string }
  /** An error status (429, 500, ...) with an OpenAI-style error body and optional retry-after header (seconds). */
  | { kind: 'error'; status: number; retryAfter?: string; message?: string };

export interface RecordedRequest {
  path: string;
  method: string;
  headers: IncomingMessage['headers'];
  body: Record<string, unknown>;
  /** The x-request-id header sent back. */
  requestId: string;
  /** HTTP status answered. */
  status: number;
  /** The id a client should keep for a 200: the completion id for chat, x-request-id for embeddings. */
  billedId: string | null;
}

type Endpoint = 'chat' | 'embeddings';

/** One request the fake billed: it generated a reply with usage, at `billedAt`. */
export interface BilledRequest {
  /** What the client keeps as provider_request_id: the completion id for chat, x-request-id for embeddings. */
  id: string;
  endpoint: Endpoint;
  usage: FakeUsage;
  /** The name in the base URL the request came through (baseURLFor), or null for the plain baseURL. */
  caller: string | null;
  /** Date.now() when the request arrived and when its reply was generated (billed). */
  receivedAt: number;
  billedAt: number;
  /** The model the reply named (the dated snapshot), and the project and API key the request was billed to. */
  model: string;
  projectId: string;
  apiKeyId: string;
}

/** Per-million USD rates the fake bills at, as decimal strings (embedding models: input only). */
export interface FakeBillingRates {
  input: string;
  cachedInput?: string;
  output?: string;
}

/** OpenAI's list prices of the models the tests call, as prices/standard.json has them. */
export const DEFAULT_BILLING_RATES: Record<string, FakeBillingRates> = {
  'gpt-4o-mini-2024-07-18': { input: '0.15', cachedInput: '0.075', output: '0.60' },
  'text-embedding-3-small': { input: '0.02' },
};

/** The project every request is billed to, and the admin key the reports answer. */
export const FAKE_PROJECT_ID = 'proj_cronledger';
export const FAKE_ADMIN_KEY = 'sk-admin-fake';
/** The API key ID a key's requests are billed under: key_ and its last 8 characters. */
export const apiKeyIdOf = (key: string | null): string => `key_${(key ?? 'none').slice(-8)}`;

/** An outage: every request is answered 503 until `until` (Date.now() ms), with Retry-After when given. */
export interface FakeOutage {
  until: number;
  retryAfter?: string;
}

/**
 * A model's rate limits, as OpenAI enforces them per organisation and model: requests and tokens admitted over the
 * last 60 seconds (a sliding window), a request counting its prompt's tokens plus its max_completion_tokens.
 */
export interface FakeRateLimit {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
}

export interface FakeOpenAIOptions {
  /** Append every billed request to this file as a JSON line, as the fake bills it. */
  billedLogFile?: string;
  /** Buckets per page of an admin report (default 1, so that a reconciliation must follow next_page). */
  adminPageSize?: number;
}

export interface FakeOpenAI {
  /** e.g. http://127.0.0.1:43121/v1, for OPENAI_BASE_URL. */
  baseURL: string;
  requests: RecordedRequest[];
  /** Every request billed so far, in the order billed. */
  billed: BilledRequest[];
  /** A base URL whose requests are recorded as coming from `caller` (e.g. one worker process incarnation). */
  baseURLFor(caller: string): string;
  /** Answer 503 (with Retry-After when given) for the next `ms` milliseconds; outage(0) ends one early. */
  outage(ms: number, opts?: { retryAfter?: string }): void;
  /** Wait this long (ms) before generating each reply (a model that thinks); 0 by default. */
  setLatency(ms: number): void;
  /** Requests answered 503 because of an outage. */
  outageAnswers(): number;
  /** Enforce (or, with undefined, stop enforcing) a model's rate limits: 429 with Retry-After beyond them. */
  setRateLimit(model: string, limit: FakeRateLimit | undefined): void;
  /** Requests answered 429 because of a rate limit. */
  rateLimitedAnswers(): number;
  /** Per caller, requests received and not yet answered (the model is still thinking). */
  inFlight(): Map<string | null, number>;
  /** Queue replies for one endpoint; each request takes the next one. */
  script(endpoint: Endpoint, ...replies: FakeReply[]): void;
  /** What an endpoint answers once its script is empty (default: ok). */
  setDefault(endpoint: Endpoint, reply: FakeReply): void;
  /** The billedId of every 200 answered so far, in order. */
  billedIds(): string[];
  /** Bill a model at these rates from now on (the admin Costs API prices the whole log at the rates in force). */
  setBillingRates(model: string, rates: FakeBillingRates): void;
  /** A request the fake billed that no caller ever received (its answer was lost): in the log and the reports only. */
  plantBilled(entry: Pick<BilledRequest, 'endpoint' | 'usage' | 'model'> & Partial<BilledRequest>): BilledRequest;
  /** Leave this billed request out of the admin reports until releaseLate (a provider that reports late). */
  reportLate(id: string): void;
  releaseLate(): void;
  reset(): void;
  close(): Promise<void>;
}

export const DEFAULT_CHAT_USAGE: FakeUsage = { prompt_tokens: 21, completion_tokens: 9 };
export const DEFAULT_EMBEDDING_USAGE: FakeUsage = { prompt_tokens: 12 };

export async function startFakeOpenAI(options: FakeOpenAIOptions = {}): Promise<FakeOpenAI> {
  const scripts: Record<Endpoint, FakeReply[]> = { chat: [], embeddings: [] };
  const defaults: Record<Endpoint, FakeReply> = { chat: { kind: 'ok' }, embeddings: { kind: 'ok' } };
  const requests: RecordedRequest[] = [];
  const billed: BilledRequest[] = [];
  let counter = 0;
  let outage: FakeOutage | undefined;
  let outageCount = 0;
  let latencyMs = 0;
  const rateLimits = new Map<string, { limit: FakeRateLimit; admitted: { at: number; tokens: number }[] }>();
  let rateLimitedCount = 0;
  const inFlight = new Map<string | null, number>();
  const billingRates = new Map(Object.entries(DEFAULT_BILLING_RATES));
  const late = new Set<string>();
  const adminPageSize = options.adminPageSize ?? 1;

  const server: Server = createServer((req, res) => {
    void handle(req, res).catch((err: unknown) => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: `fake-openai crashed: ${String(err)}`, type: 'server_error' } }));
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const body = text ? (JSON.parse(text) as Record<string, unknown>) : {};
    const receivedAt = Date.now();
    const [, caller, path] = /^(?:\/w\/([^/]+))?(\/.*)$/.exec((req.url ?? '').split('?')[0]) ?? [undefined, undefined, req.url ?? ''];
    counter += 1;
    const requestId = `req_fake_${counter}`;
    const record: RecordedRequest = { path, method: req.method ?? '', headers: req.headers, body, requestId, status: 0, billedId: null };
    requests.push(record);
    const who = caller ?? null;
    inFlight.set(who, (inFlight.get(who) ?? 0) + 1);
    const send = (status: number, payload: unknown, headers: Record<string, string> = {}): void => {
      inFlight.set(who, (inFlight.get(who) ?? 1) - 1);
      record.status = status;
      res.writeHead(status, { 'content-type': 'application/json', 'x-request-id': requestId, ...headers });
      res.end(JSON.stringify(payload));
    };

    if (req.method === 'GET' && path.startsWith('/v1/organization/')) {
      inFlight.set(who, (inFlight.get(who) ?? 1) - 1);
      record.status = req.headers.authorization === `Bearer ${FAKE_ADMIN_KEY}` ? 200 : 401;
      if (record.status === 401)
        return sendJson(res, 401, { error: { message: 'an admin key is required', type: 'invalid_request_error' } });
      const query = new URL(req.url ?? '', 'http://fake').searchParams;
      const report = adminReport(path, query);
      record.status = report ? 200 : 404;
      return sendJson(
        res,
        report ? 200 : 404,
        report ?? { error: { message: `fake-openai: no route GET ${path}`, type: 'invalid_request_error' } },
      );
    }
    const endpoint: Endpoint | undefined = path === '/v1/chat/completions' ? 'chat' : path === '/v1/embeddings' ? 'embeddings' : undefined;
    if (!endpoint || req.method !== 'POST') {
      return send(404, { error: { message: `fake-openai: no route ${req.method} ${path}`, type: 'invalid_request_error' } });
    }
    if (req.headers.authorization !== undefined && !/^Bearer \S+/.test(req.headers.authorization)) {
      return send(401, { error: { message: 'bad Authorization header', type: 'invalid_request_error' } });
    }
    if (outage && Date.now() < outage.until) {
      outageCount += 1;
      const headers: Record<string, string> = outage.retryAfter === undefined ? {} : { 'retry-after': outage.retryAfter };
      return send(
        503,
        { error: { message: 'fake outage: the service is unavailable', type: 'server_error', code: 'server_error' } },
        headers,
      );
    }
    const limited = rateLimits.get(String(body.model ?? ''));
    if (limited) {
      const tokens = requestTokens(endpoint, body);
      const now = Date.now();
      const window = limited.admitted.filter((a) => a.at > now - 60_000);
      limited.admitted = window;
      const usedTokens = window.reduce((sum, a) => sum + a.tokens, 0);
      const { requestsPerMinute: rpm, tokensPerMinute: tpm } = limited.limit;
      if ((rpm !== undefined && window.length + 1 > rpm) || (tpm !== undefined && usedTokens + tokens > tpm)) {
        rateLimitedCount += 1;
        const retryAfter = String(Math.max(1, Math.ceil((window[0].at + 60_000 - now) / 1000)));
        return send(
          429,
          { error: { message: `fake rate limit reached for ${String(body.model)}`, type: 'requests', code: 'rate_limit_exceeded' } },
          { 'retry-after': retryAfter },
        );
      }
      window.push({ at: now, tokens });
    }
    const reply = scripts[endpoint].shift() ?? defaults[endpoint];
    if (reply.kind === 'error') {
      const headers: Record<string, string> = reply.retryAfter === undefined ? {} : { 'retry-after': reply.retryAfter };
      const type = reply.status === 429 ? 'rate_limit_exceeded' : 'server_error';
      return send(reply.status, { error: { message: reply.message ?? `fake ${reply.status}`, type, code: type } }, headers);
    }
    // The model thinks; a caller that hangs up meanwhile is billed all the same, as by the real API.
    if (latencyMs > 0) await new Promise((r) => setTimeout(r, latencyMs));
    const apiKey = /^Bearer (\S+)/.exec(req.headers.authorization ?? '')?.[1] ?? null;
    const bill = (id: string, usage: FakeUsage | null | undefined, model: string): void => {
      if (!usage) return; // a reply without usage cannot be reconciled, and no test bills one
      const entry: BilledRequest = {
        id,
        endpoint,
        usage,
        caller: caller ?? null,
        receivedAt,
        billedAt: Date.now(),
        model,
        projectId: FAKE_PROJECT_ID,
        apiKeyId: apiKeyIdOf(apiKey),
      };
      billed.push(entry);
      if (options.billedLogFile) appendFileSync(options.billedLogFile, `${JSON.stringify(entry)}\n`);
    };
    const requested = String(body.model ?? 'unknown');
    if (endpoint === 'chat') {
      const model = reply.model ?? resolvedModel(requested);
      const usage = reply.kind === 'ok' && reply.usage === undefined ? DEFAULT_CHAT_USAGE : reply.usage;
      const choices =
        reply.kind === 'empty'
          ? []
          : [
              {
                index: 0,
                message: { role: 'assistant', content: reply.text ?? `fake reply ${requestId}`, refusal: null },
                finish_reason: 'stop',
                logprobs: null,
              },
            ];
      record.billedId = `chatcmpl-fake-${requestId.slice('req_fake_'.length)}`;
      bill(record.billedId, usage, model);
      return send(200, {
        id: record.billedId,
        object: 'chat.completion',
        created: 1_790_000_000,
        model,
        choices,
        ...(usage ? { usage: chatUsage(usage) } : {}),
        ...(usage?.service_tier ? { service_tier: usage.service_tier } : {}),
      });
    }
    const model = reply.model ?? requested;
    const usage = reply.kind === 'ok' && reply.usage === undefined ? DEFAULT_EMBEDDING_USAGE : reply.usage;
    const vector = (reply.kind === 'ok' && reply.vector) || [0.25, -0.5, 0.125, 1];
    const embedding = body.encoding_format === 'base64' ? Buffer.from(new Float32Array(vector).buffer).toString('base64') : vector;
    record.billedId = requestId;
    bill(record.billedId, usage, model);
    return send(200, {
      object: 'list',
      data: reply.kind === 'empty' ? [] : [{ object: 'embedding', index: 0, embedding }],
      model,
      ...(usage ? { usage: { prompt_tokens: usage.prompt_tokens, total_tokens: usage.prompt_tokens } } : {}),
    });
  }

  /** The usage or cost report of the billed log over [start_time, end_time), one page of it; undefined for no such report. */
  function adminReport(path: string, query: URLSearchParams): unknown {
    const start = Number(query.get('start_time')) * 1000;
    const end = query.get('end_time') ? Number(query.get('end_time')) * 1000 : Date.now();
    const reported = billed.filter((b) => !late.has(b.id) && b.billedAt >= start && b.billedAt < end);
    const kind = {
      '/v1/organization/usage/completions': 'chat',
      '/v1/organization/usage/embeddings': 'embeddings',
      '/v1/organization/costs': 'costs',
    }[path];
    if (!kind) return undefined;
    const groups = billingGroups();
    const add = groups.add;
    for (const b of reported) {
      const day = dayOf(b.billedAt);
      const u = b.usage;
      if (kind === 'costs') {
        const rates = billingRates.get(b.model);
        if (!rates) throw new Error(`fake-openai has no billing rates for ${b.model}`);
        const line = (what: string, tokens: number, rate: string | undefined): void => {
          if (tokens > 0)
            add(day, { line_item: `${b.model}, ${what}`, project_id: b.projectId }, { atto: costAtto(tokens, rate ?? rates.input) });
        };
        const cached = u.cached_tokens ?? 0;
        line('input', u.prompt_tokens - cached, rates.input);
        line('cached input', cached, rates.cachedInput);
        line('output', u.completion_tokens ?? 0, rates.output);
      } else if ((kind === 'chat') === (b.endpoint === 'chat')) {
        const fields = {
          model: b.model,
          project_id: b.projectId,
          api_key_id: b.apiKeyId,
          batch: false,
          service_tier: u.service_tier ?? 'default',
        };
        add(day, fields, {
          input_tokens: BigInt(u.prompt_tokens),
          ...(kind === 'chat'
            ? { input_cached_tokens: BigInt(u.cached_tokens ?? 0), output_tokens: BigInt(u.completion_tokens ?? 0) }
            : {}),
          num_model_requests: 1n,
        });
      }
    }
    const buckets = daysOf(start, end).map((day) => {
      const dayStart = Date.parse(`${day}T00:00:00Z`) / 1000;
      const results = groups.of(day).map((g) =>
        kind === 'costs'
          ? { object: 'organization.costs.result', amount: { value: rawNumber(decimalText(g.sums.atto)), currency: 'usd' }, ...g.fields }
          : {
              object: `organization.usage.${kind === 'chat' ? 'completions' : 'embeddings'}.result`,
              ...Object.fromEntries(Object.entries(g.sums).map(([k, v]) => [k, rawNumber(String(v))])),
              user_id: null,
              ...g.fields,
            },
      );
      return { object: 'bucket', start_time: dayStart, end_time: dayStart + 86_400, results };
    });
    const limit = Math.min(Number(query.get('limit') ?? '7'), adminPageSize);
    const page = pageOf(buckets, limit, query.get('page'));
    return { object: 'page', data: page.buckets, has_more: page.next !== null, next_page: page.next };
  }

  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  return {
    baseURL: `http://127.0.0.1:${port}/v1`,
    requests,
    billed,
    baseURLFor: (name) => `http://127.0.0.1:${port}/w/${encodeURIComponent(name)}/v1`,
    outage(ms, opts = {}) {
      outage = { until: Date.now() + ms, retryAfter: opts.retryAfter };
    },
    setLatency(ms) {
      latencyMs = ms;
    },
    outageAnswers: () => outageCount,
    setRateLimit(model, limit) {
      if (limit) rateLimits.set(model, { limit, admitted: [] });
      else rateLimits.delete(model);
    },
    rateLimitedAnswers: () => rateLimitedCount,
    inFlight: () => new Map([...inFlight].filter(([, n]) => n > 0)),
    billedIds: () => requests.filter((r) => r.status === 200 && r.billedId).map((r) => r.billedId as string),
    setBillingRates(model, rates) {
      billingRates.set(model, rates);
    },
    plantBilled(entry) {
      counter += 1;
      const now = Date.now();
      const planted: BilledRequest = {
        id: `planted-${counter}`,
        caller: null,
        receivedAt: now,
        billedAt: now,
        projectId: FAKE_PROJECT_ID,
        apiKeyId: apiKeyIdOf(null),
        ...entry,
      };
      billed.push(planted);
      return planted;
    },
    reportLate(id) {
      late.add(id);
    },
    releaseLate() {
      late.clear();
    },
    script(endpoint, ...replies) {
      scripts[endpoint].push(...replies);
    },
    setDefault(endpoint, reply) {
      defaults[endpoint] = reply;
    },
    reset() {
      scripts.chat.length = 0;
      scripts.embeddings.length = 0;
      defaults.chat = { kind: 'ok' };
      defaults.embeddings = { kind: 'ok' };
      requests.length = 0;
      billed.length = 0;
      outage = undefined;
      outageCount = 0;
      latencyMs = 0;
      rateLimits.clear();
      rateLimitedCount = 0;
      billingRates.clear();
      for (const [model, rates] of Object.entries(DEFAULT_BILLING_RATES)) billingRates.set(model, rates);
      late.clear();
      inFlight.clear();
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve, reject) => server.close((err) => (err ? reject(err) : resolve())));
    },
  };
}

/** What a request counts against tokens per minute: its messages' tokens and its output cap (chat), or its input's. */
function requestTokens(endpoint: Endpoint, body: Record<string, unknown>): number {
  if (endpoint === 'embeddings') return encode(String(body.input ?? '')).length;
  const messages = (body.messages as { role: 'user'; content: string }[] | undefined) ?? [];
  const cap = Number(body.max_completion_tokens ?? body.max_tokens ?? 0);
  return encodeChat(messages, 'gpt-4o-mini', { disallowedSpecial: new Set<string>() }).length + cap;
}

function chatUsage(u: FakeUsage) {
  const completion = u.completion_tokens ?? 0;
  return {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: completion,
    total_tokens: u.prompt_tokens + completion,
    prompt_tokens_details: {
      cached_tokens: u.cached_tokens ?? 0,
      audio_tokens: 0,
      ...(u.cache_write_tokens === undefined ? {} : { cache_write_tokens: u.cache_write_tokens }),
    },
    completion_tokens_details: { reasoning_tokens: u.reasoning_tokens ?? 0, audio_tokens: 0 },
  };
}

/** What a real endpoint reports as the model it ran: a dated snapshot of the requested alias. */
const resolvedModel = (requested: string): string => (/-\d{4}-\d{2}-\d{2}$/.test(requested) ? requested : `${requested}-2024-07-18`);

/**
 * A chat call of 800 prompt and 40 reply tokens at noon (UTC) of `day`, booked in the ledger (dated in the past: only
 * the owner may) and billed alike by the fake: a clean key for reconciliation. Returns its time.
 */
export async function bookAndBillChat(ownerPool: pg.Pool, openai: FakeOpenAI, key: string, day: string, model: string): Promise<Date> {
  const at = new Date(Date.parse(`${day}T12:00:00Z`));
  await ownerPool.query(
    `select book_usage($1, $2, $3, $4, null, 'openai/gpt-4o-mini', $5, 'chat', 'ok', 1,
                       800, 0, 40, 0, 0, 0, 'default', $6, 'test', null, $7, $7)`,
    [key, `u-${key}`, `run-${key}`, `cron-${key}`, model, `chatcmpl-${key}`, at],
  );
  openai.plantBilled({ endpoint: 'chat', model, usage: { prompt_tokens: 800, completion_tokens: 40 }, billedAt: at.getTime() });
  return at;
}
