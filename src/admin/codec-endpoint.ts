import type { Payload, PayloadCodec } from '@temporalio/common';
import type { Context, MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';

/**
 * Temporal's codec-server protocol on the admin page, behind its token: `POST /codec/decode` takes
 * `{"payloads": [{"metadata": {"<key>": "<base64>"}, "data": "<base64>"}]}` (proto3 JSON: every bytes field is base64)
 * and answers the same shape, decrypted. The Web UI (its codec endpoint, with `includeCredentials` so the admin cookie
 * goes along) and `temporal workflow show --codec-endpoint <admin>/codec --codec-auth 'Bearer <token>'` call it.
 * Only decode: the admin page writes nothing, so it seals nothing for anyone either.
 */

export const CODEC_PATH = '/codec';
export const CODEC_DECODE_PATH = `${CODEC_PATH}/decode`;

/** A history page's payloads in one request; Temporal's own blob limit is 2 MB per payload. */
const MAX_BODY_BYTES = 8 * 1024 * 1024;

interface JsonPayload {
  metadata?: Record<string, string> | null;
  data?: string | null;
}

class BadRequest extends Error {}

function fromJson(value: unknown, i: number): Payload {
  if (typeof value !== 'object' || value === null) throw new BadRequest(`payloads[${i}] is not an object`);
  const { metadata, data } = value as JsonPayload;
  if (data !== undefined && data !== null && typeof data !== 'string') throw new BadRequest(`payloads[${i}].data is not base64 text`);
  const entries = Object.entries(metadata ?? {});
  for (const [k, v] of entries) if (typeof v !== 'string') throw new BadRequest(`payloads[${i}].metadata.${k} is not base64 text`);
  return {
    metadata: Object.fromEntries(entries.map(([k, v]) => [k, Buffer.from(v, 'base64')])),
    data: data ? Buffer.from(data, 'base64') : undefined,
  };
}

const toJson = ({ metadata, data }: Payload): JsonPayload => ({
  metadata: Object.fromEntries(Object.entries(metadata ?? {}).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
  data: data ? Buffer.from(data).toString('base64') : undefined,
});

/**
 * CORS for the Web UI's origin only (the browser calls from there), credentials included; answers its preflight,
 * which carries no token. Registered before the read-only and token checks.
 */
export function codecCors(allowedOrigin: string | undefined): MiddlewareHandler {
  return async (c, next) => {
    const origin = c.req.header('Origin');
    const allowed = Boolean(origin && allowedOrigin && origin === allowedOrigin);
    if (c.req.method === 'OPTIONS') {
      if (!allowed) return c.body(null, 403);
      return c.body(null, 204, {
        'Access-Control-Allow-Origin': origin!,
        'Access-Control-Allow-Credentials': 'true',
        'Access-Control-Allow-Methods': 'POST',
        'Access-Control-Allow-Headers': 'Content-Type, X-Namespace, Authorization',
        'Access-Control-Max-Age': '600',
        Vary: 'Origin',
      });
    }
    await next();
    c.header('Vary', 'Origin');
    if (allowed) {
      c.header('Access-Control-Allow-Origin', origin!);
      c.header('Access-Control-Allow-Credentials', 'true');
    }
  };
}

export const codecBodyLimit = (): MiddlewareHandler =>
  bodyLimit({ maxSize: MAX_BODY_BYTES, onError: (c) => c.json({ error: `the body is over ${MAX_BODY_BYTES} bytes` }, 413) });

/**
 * The decode handler. It needs the admin token to be configured (an admin page open on loopback without one decrypts
 * nothing), and keys: without them it says how to configure them rather than answering ciphertext.
 */
export function codecDecode(codec: PayloadCodec | undefined, tokenConfigured: boolean) {
  return async (c: Context) => {
    if (!tokenConfigured) {
      return c.json({ error: 'the codec endpoint is served only behind a token; set CRONLEDGER_ADMIN_TOKEN' }, 403);
    }
    if (!codec) {
      return c.json({ error: 'this admin server has no payload keys (set CRONLEDGER_PAYLOAD_KEYS or CRONLEDGER_PAYLOAD_KEYS_FILE)' }, 503);
    }
    let payloads: Payload[];
    try {
      const body: unknown = await c.req.json();
      const raw = (body as { payloads?: unknown } | null)?.payloads;
      if (!Array.isArray(raw)) throw new BadRequest('the body has no "payloads" array');
      payloads = raw.map(fromJson);
    } catch (err) {
      return c.json({ error: err instanceof BadRequest ? err.message : 'the body is not JSON' }, 400);
    }
    try {
      return c.json({ payloads: (await codec.decode(payloads)).map(toJson) });
    } catch (err) {
      // The codec's messages name key IDs and never key material or payload contents.
      return c.json({ error: (err as Error).message }, 422);
    }
  };
}
