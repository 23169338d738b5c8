import { type Client } from '@temporalio/client';
import type { Payload } from '@temporalio/common';
import proto from '@temporalio/proto';
import { NativeConnection } from '@temporalio/worker';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAdminServer, type RunningAdmin } from '../src/admin/server';
import { connectClient, temporalConnectionOptions } from '../src/client';
import { createPool } from '../src/db/pool';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { MockProvider } from '../src/models/mock-provider';
import {
  EncryptionCodec,
  parsePayloadKeys,
  payloadKeysFromEnv,
  PAYLOAD_KEYS_FILE_VARIABLE,
  PAYLOAD_KEYS_VARIABLE,
  type PayloadKeys,
} from '../src/payload-codec';
import { createCronledgerWorker } from '../src/worker-setup';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { waitFor } from './support/wait';
import { workflowBundle } from './support/workers';

// A CommonJS module whose named exports Node's ESM loader cannot see.
const { temporal } = proto;

const newKey = (): string => randomBytes(32).toString('base64');
const payload = (text: string): Payload => ({
  metadata: { encoding: Buffer.from('json/plain') },
  data: Buffer.from(JSON.stringify(text)),
});
const text = (p: Payload): string => Buffer.from(p.data ?? []).toString('utf8');

describe('payload keys', () => {
  it('name the variable and the key, never the key bytes, when one is malformed', () => {
    const short = randomBytes(16).toString('base64');
    expect(() => parsePayloadKeys(`k1=${short}`, PAYLOAD_KEYS_VARIABLE)).toThrow(
      /^CRONLEDGER_PAYLOAD_KEYS: key k1 is 16 bytes; AES-256 needs 32/,
    );
    expect(() => parsePayloadKeys(`k1=${newKey()},k2=not*base64`, PAYLOAD_KEYS_VARIABLE)).toThrow(
      /^CRONLEDGER_PAYLOAD_KEYS: key k2 is not base64/,
    );
    // A bare key, with the padding base64 gives 32 bytes (one '=') or two: named by its position, never by its text.
    for (const bare of [newKey(), `${randomBytes(31).toString('base64')}`, 'a+b/c=', 'abc==']) {
      expect(() => parsePayloadKeys(`k0=${newKey()} ${bare}`, PAYLOAD_KEYS_VARIABLE)).toThrow(
        /^CRONLEDGER_PAYLOAD_KEYS: entry 2 is not id=base64key/,
      );
    }
    const key = newKey();
    expect(() => parsePayloadKeys(`k1=${key} k1=${newKey()}`, PAYLOAD_KEYS_VARIABLE)).toThrow(/key ID k1 is listed twice/);
    try {
      parsePayloadKeys(`k1=${key.slice(0, -4)}`, PAYLOAD_KEYS_VARIABLE);
    } catch (err) {
      expect((err as Error).message).not.toContain(key.slice(0, 8));
    }
  });

  it('come from the variable or from a file (comments and lines allowed), and the first one listed encrypts', () => {
    const [a, b] = [newKey(), newKey()];
    expect(payloadKeysFromEnv({})).toBeUndefined();
    const inline = payloadKeysFromEnv({ [PAYLOAD_KEYS_VARIABLE]: `new=${a}, old=${b}` })!;
    expect(inline.currentId).toBe('new');
    expect([...inline.keys.keys()]).toEqual(['new', 'old']);
    const file = join(mkdtempSync(join(tmpdir(), 'cronledger-keys-')), 'payload_keys');
    writeFileSync(file, `# current first\nnew=${a}\nold=${b} # until 2027\n`);
    expect(payloadKeysFromEnv({ [PAYLOAD_KEYS_FILE_VARIABLE]: file })).toEqual(inline);
    writeFileSync(file, `k=${randomBytes(31).toString('base64')}\n`);
    expect(() => payloadKeysFromEnv({ [PAYLOAD_KEYS_FILE_VARIABLE]: file })).toThrow(
      `${PAYLOAD_KEYS_FILE_VARIABLE}=${file}: key k is 31 bytes`,
    );
    expect(() => payloadKeysFromEnv({ [PAYLOAD_KEYS_VARIABLE]: `k=${a}`, [PAYLOAD_KEYS_FILE_VARIABLE]: file })).toThrow(/not both/);
  });

  it('rotate: a new current key seals, the old one still opens what it sealed, and a dropped key is named', async () => {
    const [k1, k2] = [newKey(), newKey()];
    const before = new EncryptionCodec(parsePayloadKeys(`k1=${k1}`, 'test'));
    const after = new EncryptionCodec(parsePayloadKeys(`k2=${k2},k1=${k1}`, 'test'));
    const onlyNew = new EncryptionCodec(parsePayloadKeys(`k2=${k2}`, 'test'));
    const [old] = await before.encode([payload('sealed under k1')]);
    const [fresh] = await after.encode([payload('sealed under k2')]);
    expect(Buffer.from(old.metadata!['encryption-key-id']).toString()).toBe('k1');
    expect(Buffer.from(fresh.metadata!['encryption-key-id']).toString()).toBe('k2');
    expect(Buffer.from(fresh.metadata!.encoding).toString()).toBe('binary/encrypted');
    expect((await after.decode([old, fresh])).map(text)).toEqual(['"sealed under k1"', '"sealed under k2"']);
    await expect(onlyNew.decode([old])).rejects.toThrow(/key ID "k1", which is not among the configured keys \(k2\)/);
    // A random IV per payload: the same value never seals to the same bytes.
    const [x, y] = await after.encode([payload('same'), payload('same')]);
    expect(Buffer.from(x.data!).equals(Buffer.from(y.data!))).toBe(false);
    // The key ID is authenticated: relabelling a payload fails instead of decrypting under another key.
    const relabelled = { ...fresh, metadata: { ...fresh.metadata, 'encryption-key-id': Buffer.from('k1') } };
    await expect(after.decode([relabelled])).rejects.toThrow(/does not authenticate under key ID k1/);
    // Payloads that were never encrypted pass through.
    expect((await after.decode([payload('plain')])).map(text)).toEqual(['"plain"']);
  });
});

describe('a scheduled run with a payload key', () => {
  let ctx: TestContext;
  let keys: PayloadKeys;
  let keyed: Client;
  let readonly: pg.Pool;
  let admin: RunningAdmin;
  const token = randomBytes(24).toString('hex');
  const uiOrigin = 'http://127.0.0.1:8233';

  beforeAll(async () => {
    ctx = await createTestContext(import.meta.url);
    await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
    keys = parsePayloadKeys(`k1=${newKey()}`, 'test');
    keyed = await connectClient(ctx, { payloadKeys: keys });
    readonly = createPool(ctx.readonlyDatabaseUrl);
    admin = await startAdminServer({
      pool: readonly,
      namespace: ctx.namespace,
      uiUrl: uiOrigin,
      token,
      host: '127.0.0.1',
      port: 0,
      payloadCodec: new EncryptionCodec(keys),
    });
  });

  afterAll(async () => {
    await admin?.close();
    await readonly?.end();
    await keyed?.connection.close();
    await ctx?.close();
  });

  it('leaves no prompt or reply text in the raw history, and the codec endpoint decodes it for a token holder', async () => {
    const marker = `PROMPT-${randomUUID()}`;
    const taskId = 'sealed-task';
    const dir = mkdtempSync(join(tmpdir(), 'cronledger-sealed-'));
    const tasksFile = join(dir, 'tasks.json');
    // Once a year, so only the trigger below runs it.
    writeFileSync(
      tasksFile,
      JSON.stringify({ tasks: [{ id: taskId, cron: '0 0 1 1 *', userId: 'sealed-user', input: `${marker} say hi` }] }),
    );
    const env = { ...ctx.env, [PAYLOAD_KEYS_VARIABLE]: `k1=${keys.keys.get('k1')!.toString('base64')}` };
    const applied = await runCli(['tasks', 'apply', tasksFile], env);
    expect(applied.code, applied.stderr).toBe(0);

    const connection = await NativeConnection.connect(temporalConnectionOptions(ctx));
    const worker = await createCronledgerWorker({
      connection,
      namespace: ctx.namespace,
      taskQueue: ctx.taskQueue,
      workflowBundle: await workflowBundle(),
      deps: { pool: ctx.pool, provider: new MockProvider(), workerId: 'sealed-worker' },
      payloadKeys: keys,
    });
    let run!: { workflow_id: string; temporal_run_id: string };
    try {
      await worker.runUntil(async () => {
        await keyed.schedule.getHandle(`cron-${taskId}`).trigger();
        await waitFor(
          async () => {
            const r = await ctx.pool.query(`select workflow_id, temporal_run_id, status from runs where task_id = $1`, [taskId]);
            run = r.rows[0];
            return r.rows[0]?.status === 'completed';
          },
          60_000,
          `a completed run of ${taskId}`,
        );
        await keyed.workflow.getHandle(run.workflow_id, run.temporal_run_id).result();
      });
    } finally {
      await connection.close();
    }

    // The raw history and schedule, as anyone with Temporal access (the Web UI, `temporal workflow show`) reads them.
    const events: proto.temporal.api.history.v1.IHistoryEvent[] = [];
    let nextPageToken: Uint8Array | undefined;
    do {
      const page = await ctx.client.workflowService.getWorkflowExecutionHistory({
        namespace: ctx.namespace,
        execution: { workflowId: run.workflow_id, runId: run.temporal_run_id },
        nextPageToken,
      });
      events.push(...(page.history?.events ?? []));
      nextPageToken = page.nextPageToken?.length ? page.nextPageToken : undefined;
    } while (nextPageToken);
    const history = temporal.api.history.v1.History.create({ events });
    const rawHistory = Buffer.from(temporal.api.history.v1.History.encode(history).finish());
    const schedule = await ctx.client.workflowService.describeSchedule({ namespace: ctx.namespace, scheduleId: `cron-${taskId}` });
    const rawSchedule = Buffer.from(temporal.api.workflowservice.v1.DescribeScheduleResponse.encode(schedule).finish());
    for (const raw of [rawHistory, rawSchedule]) {
      expect(raw.includes(marker)).toBe(false);
      expect(raw.includes('Done:')).toBe(false); // the mock's reply: "[mock <model>] Done: <prompt> (ref ...)"
      expect(raw.includes('binary/encrypted')).toBe(true);
    }

    // Every payload of the history, in the codec protocol's JSON (proto3 JSON: bytes as base64).
    const payloads = collectPayloads(temporal.api.history.v1.History.toObject(history, { bytes: String, longs: String }));
    expect(payloads.length).toBeGreaterThan(3);
    const decode = (headers: Record<string, string>) =>
      fetch(`${admin.url}/codec/decode`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'X-Namespace': ctx.namespace, ...headers },
        body: JSON.stringify({ payloads }),
      });
    const res = await decode({ Authorization: `Bearer ${token}` });
    expect(res.status).toBe(200);
    const decoded = ((await res.json()) as { payloads: { metadata: Record<string, string>; data?: string }[] }).payloads;
    expect(decoded).toHaveLength(payloads.length);
    const plain = decoded.map((p) => Buffer.from(p.data ?? '', 'base64').toString('utf8')).join('\n');
    expect(plain).toContain(`${marker} say hi`);
    expect(plain).toMatch(new RegExp(`\\[mock [^\\]]+\\] Done: ${marker} say hi \\(ref [0-9a-f]{8}\\)`));
    expect(decoded.every((p) => Buffer.from(p.metadata.encoding, 'base64').toString() !== 'binary/encrypted')).toBe(true);

    // Without the token, or with another, nothing is decoded.
    for (const headers of [{}, { Authorization: `Bearer ${token}x` }] as Record<string, string>[]) {
      const refused = await decode(headers);
      expect(refused.status).toBe(401);
      expect(await refused.text()).not.toContain(marker);
    }
    // The Web UI's origin may call it from the browser (preflight without a token); another origin may not.
    const preflight = (origin: string) =>
      fetch(`${admin.url}/codec/decode`, {
        method: 'OPTIONS',
        headers: { Origin: origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type,x-namespace' },
      });
    const ui = await preflight(uiOrigin);
    expect(ui.status).toBe(204);
    expect(ui.headers.get('access-control-allow-origin')).toBe(uiOrigin);
    expect(ui.headers.get('access-control-allow-headers')).toMatch(/X-Namespace/i);
    const other = await preflight('http://evil.example');
    expect(other.status).toBe(403);
    expect(other.headers.get('access-control-allow-origin')).toBeNull();
  });
});

/** Every object shaped like a payload (metadata with an encoding) anywhere in a proto3-JSON value. */
function collectPayloads(value: unknown, out: { metadata: Record<string, string>; data?: string }[] = []) {
  if (Array.isArray(value)) for (const v of value) collectPayloads(v, out);
  else if (value && typeof value === 'object') {
    const o = value as Record<string, unknown>;
    const metadata = o.metadata as Record<string, unknown> | undefined;
    if (metadata && typeof metadata.encoding === 'string') out.push(o as { metadata: Record<string, string>; data?: string });
    else for (const v of Object.values(o)) collectPayloads(v, out);
  }
  return out;
}
