import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { countTokens } from 'gpt-tokenizer/model/gpt-4o-mini';
import { PLAIN_TEXT_TOKENS } from '../../src/models/plain-text-tokens';
import { billingGroups, costAtto, dayOf, daysOf, decimalText, pageOf, rawNumber, sendJson } from './fake-billing';

/**
 * A local stand-in for Anthropic's Messages API over HTTP on 127.0.0.1: POST /v1/messages (a JSON reply, or Server-Sent
 * Events when the body says stream: true) and POST /v1/messages/count_tokens, answering /v1/messages from a script and
 * recording every request it saw. When the script runs out, the default reply is used (ok, billing the prompt as
 * count_tokens counts it).
 *
 * Like the real API it bills a request when it generates the reply, whether or not the caller reads it to the end.
 * Its token count is not o200k's: it gives more tokens for the same text (claudeTokens), as Claude's tokenizer does,
 * so that a budget guard counting with o200k would reserve too little.
 *
 * From its log of billed requests it serves the Admin API's reports to an admin key, as Anthropic does: the messages
 * usage report (/v1/organizations/usage_report/messages, daily buckets by model, tier, workspace and API key) and the
 * cost report (/v1/organizations/cost_report, amounts in cents as decimal strings, priced at its own billing rates),
 * paged one bucket at a time. A test plants drift with plantBilled, setBillingRates and reportLate/releaseLate.
 */

export interface FakeAnthropicUsage {
  /** The uncached prompt tokens (Anthropic's input_tokens); default: claudeTokens of the prompt. */
  input_tokens?: number;
  output_tokens?: number;
  cache_read_input_tokens?: number;
  /** Cache writes by lifetime; cache_creation_input_tokens is their sum. */
  cache_write_5m?: number;
  cache_write_1h?: number;
  /** Reported as output_tokens_details.thinking_tokens. */
  thinking_tokens?: number;
  service_tier?: string;
}

export type FakeAnthropicReply =
  /** 200 with a text reply and this usage (null: no usage object at all). */
  | { kind: 'ok'; usage?: FakeAnthropicUsage | null; text?: string; model?: string }
  /** 200 with usage but no text block (stop_reason max_tokens): billed yet unusable. */
  | { kind: 'empty'; usage?: FakeAnthropicUsage }
  /** A streamed reply whose connection is destroyed right after this event was sent (billed all the same). */
  | { kind: 'cut'; after: 'message_start' | 'content_block_delta' | 'message_delta'; usage?: FakeAnthropicUsage }
  /** An error status (429, 500, 529 overloaded...) with Anthropic's error body and an optional retry-after (seconds). */
  | { kind: 'error'; status: number; retryAfter?: string; message?: string };

export interface FakeAnthropicRequest {
  path: string;
  headers: IncomingMessage['headers'];
  body: Record<string, unknown>;
  status: number;
  /** The message id of a billed reply. */
  billedId: string | null;
  streamed: boolean;
}

/** One request the fake billed, with the usage object it reported (as Anthropic writes it). */
export interface FakeAnthropicBill {
  id: string;
  usage: Record<string, unknown>;
  model: string;
  billedAt: number;
  workspaceId: string;
  apiKeyId: string;
}

/** Per-million USD rates by token type, as decimal strings. */
export interface FakeAnthropicRates {
  input: string;
  cacheRead: string;
  cacheWrite5m: string;
  cacheWrite1h: string;
  output: string;
}

/** Anthropic's list prices of the models the tests call (standard tier), as prices/standard.json has them. */
export const DEFAULT_ANTHROPIC_RATES: Record<string, FakeAnthropicRates> = {
  'claude-sonnet-4-5': { input: '3', cacheRead: '0.30', cacheWrite5m: '3.75', cacheWrite1h: '6', output: '15' },
  'claude-haiku-4-5': { input: '1', cacheRead: '0.10', cacheWrite5m: '1.25', cacheWrite1h: '2', output: '5' },
};
export const FAKE_WORKSPACE_ID = 'wrkspc_cronledger';
export const FAKE_ANTHROPIC_ADMIN_KEY = 'sk-ant-admin-fake';

export interface FakeAnthropic {
  /** e.g. http://127.0.0.1:43121, for ANTHROPIC_BASE_URL (the SDK adds /v1/messages). */
  baseURL: string;
  requests: FakeAnthropicRequest[];
  billed: FakeAnthropicBill[];
  script(...replies: FakeAnthropicReply[]): void;
  setBillingRates(model: string, rates: FakeAnthropicRates): void;
  /** A request billed that no caller received: in the log and the reports only. `usage` as usageObject takes it. */
  plantBilled(entry: { model: string; usage: FakeAnthropicUsage; billedAt?: number }): FakeAnthropicBill;
  /** Leave this billed request out of the reports until releaseLate. */
  reportLate(id: string): void;
  releaseLate(): void;
  reset(): void;
  close(): Promise<void>;
}

const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  404: 'not_found_error',
  429: 'rate_limit_error',
  500: 'api_error',
  529: 'overloaded_error',
};

/**
 * The fake's token count of a user message: a third more than o200k's count of the text, plus 10 for the message
 * format. It is above the budget guard's o200k count (the text's tokens plus a few for the chat format) for any text.
 */
export const claudeTokens = (text: string): number => Math.ceil((countTokens(text, PLAIN_TEXT_TOKENS) * 4) / 3) + 10;

const promptOf = (body: Record<string, unknown>): string =>
  ((body.messages as { content: unknown }[] | undefined) ?? [])
    .map((m) => (typeof m.content === 'string' ? m.content : JSON.stringify(m.content)))
    .join('\n');

export async function startFakeAnthropic(): Promise<FakeAnthropic> {
  const script: FakeAnthropicReply[] = [];
  const requests: FakeAnthropicRequest[] = [];
  const billed: FakeAnthropicBill[] = [];
  let counter = 0;
  const billingRates = new Map(Object.entries(DEFAULT_ANTHROPIC_RATES));
  const late = new Set<string>();

  const server: Server = createServer((req, res) => {
    void handle(req, res).catch((err: unknown) => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ type: 'error', error: { type: 'api_error', message: `fake-anthropic crashed: ${String(err)}` } }));
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const body = text ? (JSON.parse(text) as Record<string, unknown>) : {};
    const path = (req.url ?? '').split('?')[0];
    counter += 1;
    const requestId = `req_fake_${counter}`;
    const record: FakeAnthropicRequest = { path, headers: req.headers, body, status: 0, billedId: null, streamed: body.stream === true };
    const send = (status: number, payload: unknown, headers: Record<string, string> = {}): void => {
      record.status = status;
      res.writeHead(status, { 'content-type': 'application/json', 'request-id': requestId, ...headers });
      res.end(JSON.stringify(payload));
    };
    const error = (status: number, message: string, headers: Record<string, string> = {}): void =>
      send(status, { type: 'error', error: { type: ERROR_TYPES[status] ?? 'api_error', message } }, headers);

    if (req.method === 'GET' && path.startsWith('/v1/organizations/')) {
      requests.push(record);
      if (req.headers['x-api-key'] !== FAKE_ANTHROPIC_ADMIN_KEY || !req.headers['anthropic-version']) {
        return error(401, 'an admin key and anthropic-version are required');
      }
      const report = adminReport(path, new URL(req.url ?? '', 'http://fake').searchParams);
      if (!report) return error(404, `fake-anthropic: no route GET ${path}`);
      record.status = 200;
      return sendJson(res, 200, report);
    }
    if (req.method !== 'POST' || (path !== '/v1/messages' && path !== '/v1/messages/count_tokens')) {
      requests.push(record);
      return error(404, `fake-anthropic: no route ${req.method} ${path}`);
    }
    requests.push(record);
    // The SDK sends its key as x-api-key or, from 1.x, as Authorization: Bearer.
    const key = req.headers['x-api-key'] ?? /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
    if (!key || !req.headers['anthropic-version']) return error(401, 'an API key and anthropic-version are required');
    if (path === '/v1/messages/count_tokens') return send(200, { input_tokens: claudeTokens(promptOf(body)) });

    const reply = script.shift() ?? { kind: 'ok' };
    if (reply.kind === 'error') {
      return error(
        reply.status,
        reply.message ?? `fake ${reply.status}`,
        reply.retryAfter === undefined ? {} : { 'retry-after': reply.retryAfter },
      );
    }
    const model = (reply.kind === 'ok' && reply.model) || String(body.model ?? 'unknown');
    const id = `msg_fake_${counter}`;
    record.billedId = id;
    const given = reply.kind === 'ok' && reply.usage === null ? null : (reply.usage ?? {});
    const usage = given && usageObject(given, promptOf(body));
    const apiKey = String(key);
    if (usage)
      billed.push({ id, usage, model, billedAt: Date.now(), workspaceId: FAKE_WORKSPACE_ID, apiKeyId: `apikey_${apiKey.slice(-8)}` });
    const replyText = reply.kind === 'empty' ? '' : (reply.kind === 'ok' && reply.text) || `fake claude reply ${id}`;
    const stopReason = reply.kind === 'empty' ? 'max_tokens' : 'end_turn';
    if (!record.streamed) {
      if (reply.kind === 'cut') return error(400, 'fake-anthropic: a cut reply needs stream: true');
      return send(200, {
        id,
        type: 'message',
        role: 'assistant',
        model,
        content: replyText ? [{ type: 'text', text: replyText, citations: null }] : [],
        stop_reason: stopReason,
        stop_sequence: null,
        ...(usage ? { usage } : {}),
      });
    }

    record.status = 200;
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'request-id': requestId });
    res.flushHeaders();
    /** Writes one event and waits until it left; false when the script cuts the stream after it. */
    const event = async (type: string, data: Record<string, unknown>): Promise<boolean> => {
      await new Promise<void>((resolve, reject) =>
        res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`, (err) => (err ? reject(err) : resolve())),
      );
      if (reply.kind === 'cut' && reply.after === type) {
        res.socket?.destroy(); // the connection drops mid-stream, after the provider billed the request
        return false;
      }
      return true;
    };
    // message_start carries the prompt side and 1 output token so far; message_delta the cumulative final counts.
    const startUsage = usage && { ...usage, output_tokens: Math.min(1, Number(usage.output_tokens)), output_tokens_details: null };
    const message = { id, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null };
    if (!(await event('message_start', { message: { ...message, ...(startUsage ? { usage: startUsage } : {}) } }))) return;
    if (replyText) {
      if (!(await event('content_block_start', { index: 0, content_block: { type: 'text', text: '', citations: null } }))) return;
      await event('ping', {});
      const half = Math.ceil(replyText.length / 2);
      for (const piece of [replyText.slice(0, half), replyText.slice(half)]) {
        if (!(await event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: piece } }))) return;
      }
      if (!(await event('content_block_stop', { index: 0 }))) return;
    }
    const { cache_creation: _split, service_tier: _tier, ...deltaUsage } = usage ?? {};
    const delta = { delta: { stop_reason: stopReason, stop_sequence: null }, ...(usage ? { usage: deltaUsage } : {}) };
    if (!(await event('message_delta', delta))) return;
    await event('message_stop', {});
    res.end();
  }

  function adminReport(path: string, query: URLSearchParams): unknown {
    const kind = { '/v1/organizations/usage_report/messages': 'usage', '/v1/organizations/cost_report': 'cost' }[path];
    if (!kind) return undefined;
    const start = Date.parse(query.get('starting_at') ?? '');
    const end = query.get('ending_at') ? Date.parse(query.get('ending_at') ?? '') : Date.now();
    const groups = billingGroups();
    const add = groups.add;
    for (const b of billed.filter((x) => !late.has(x.id) && x.billedAt >= start && x.billedAt < end)) {
      const u = b.usage as Record<string, number> & { cache_creation: Record<string, number>; service_tier: string };
      const tokens: [string, number][] = [
        ['uncached_input_tokens', u.input_tokens],
        ['cache_read_input_tokens', u.cache_read_input_tokens],
        ['cache_creation.ephemeral_5m_input_tokens', u.cache_creation.ephemeral_5m_input_tokens],
        ['cache_creation.ephemeral_1h_input_tokens', u.cache_creation.ephemeral_1h_input_tokens],
        ['output_tokens', u.output_tokens],
      ];
      const day = dayOf(b.billedAt);
      const tier = u.service_tier;
      if (kind === 'usage') {
        add(
          day,
          { model: b.model, service_tier: tier, workspace_id: b.workspaceId, api_key_id: b.apiKeyId, context_window: '0-200k' },
          Object.fromEntries(tokens.map(([k, n]) => [k, BigInt(n)])),
        );
        continue;
      }
      const rates = billingRates.get(b.model);
      if (!rates) throw new Error(`fake-anthropic has no billing rates for ${b.model}`);
      const rateOf: Record<string, string> = {
        uncached_input_tokens: rates.input,
        cache_read_input_tokens: rates.cacheRead,
        'cache_creation.ephemeral_5m_input_tokens': rates.cacheWrite5m,
        'cache_creation.ephemeral_1h_input_tokens': rates.cacheWrite1h,
        output_tokens: rates.output,
      };
      for (const [tokenType, n] of tokens) {
        if (n <= 0) continue;
        const fields = {
          workspace_id: b.workspaceId,
          description: `${b.model} usage - ${tokenType}`,
          cost_type: 'tokens',
          context_window: '0-200k',
          model: b.model,
          service_tier: tier,
          token_type: tokenType,
        };
        add(day, fields, { atto: costAtto(n, rateOf[tokenType]) });
      }
    }
    const buckets = daysOf(start, end).map((day) => ({
      starting_at: `${day}T00:00:00Z`,
      ending_at: new Date(Date.parse(`${day}T00:00:00Z`) + 86_400_000).toISOString().replace('.000Z', 'Z'),
      results: groups.of(day).map((g) =>
        kind === 'cost'
          ? { currency: 'USD', amount: decimalText(g.sums.atto * 100n), ...g.fields }
          : {
              uncached_input_tokens: rawNumber(String(g.sums.uncached_input_tokens)),
              cache_read_input_tokens: rawNumber(String(g.sums.cache_read_input_tokens)),
              cache_creation: {
                ephemeral_5m_input_tokens: rawNumber(String(g.sums['cache_creation.ephemeral_5m_input_tokens'])),
                ephemeral_1h_input_tokens: rawNumber(String(g.sums['cache_creation.ephemeral_1h_input_tokens'])),
              },
              output_tokens: rawNumber(String(g.sums.output_tokens)),
              server_tool_use: { web_search_requests: 0 },
              ...g.fields,
            },
      ),
    }));
    const page = pageOf(buckets, Math.min(Number(query.get('limit') ?? '7'), 1), query.get('page'));
    return { data: page.buckets, has_more: page.next !== null, next_page: page.next };
  }

  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  return {
    baseURL: `http://127.0.0.1:${port}`,
    requests,
    billed,
    script: (...replies) => void script.push(...replies),
    setBillingRates: (model, rates) => void billingRates.set(model, rates),
    plantBilled({ model, usage, billedAt }) {
      counter += 1;
      const bill: FakeAnthropicBill = {
        id: `msg_planted_${counter}`,
        usage: usageObject(usage, ''),
        model,
        billedAt: billedAt ?? Date.now(),
        workspaceId: FAKE_WORKSPACE_ID,
        apiKeyId: 'apikey_planted',
      };
      billed.push(bill);
      return bill;
    },
    reportLate: (id) => void late.add(id),
    releaseLate: () => late.clear(),
    reset() {
      script.length = 0;
      requests.length = 0;
      billed.length = 0;
      billingRates.clear();
      for (const [model, rates] of Object.entries(DEFAULT_ANTHROPIC_RATES)) billingRates.set(model, rates);
      late.clear();
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve, reject) => server.close((err) => (err ? reject(err) : resolve())));
    },
  };
}

/** The usage object Anthropic sends: input_tokens excludes the cache reads and writes, which are reported beside it. */
function usageObject(u: FakeAnthropicUsage, prompt: string): Record<string, unknown> {
  const write5m = u.cache_write_5m ?? 0;
  const write1h = u.cache_write_1h ?? 0;
  return {
    input_tokens: u.input_tokens ?? claudeTokens(prompt),
    cache_creation_input_tokens: write5m + write1h,
    cache_read_input_tokens: u.cache_read_input_tokens ?? 0,
    cache_creation: { ephemeral_5m_input_tokens: write5m, ephemeral_1h_input_tokens: write1h },
    output_tokens: u.output_tokens ?? 9,
    output_tokens_details: u.thinking_tokens === undefined ? null : { thinking_tokens: u.thinking_tokens },
    server_tool_use: null,
    service_tier: u.service_tier ?? 'standard',
  };
}
