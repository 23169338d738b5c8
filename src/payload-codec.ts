import { METADATA_ENCODING_KEY, type DataConverter, type Payload, type PayloadCodec } from '@temporalio/common';
import proto from '@temporalio/proto';
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { secretSetting } from './config';
import { UserError } from './errors';

// A CommonJS module whose named exports Node's ESM loader cannot see.
const { temporal } = proto;

/**
 * Payload encryption: every payload a cronledger client or worker sends to Temporal (workflow and activity inputs and
 * results, schedule action arguments, memos) is sealed with AES-256-GCM when a key is configured, so prompts and
 * replies never sit in Temporal's history in clear text. The shape is Temporal's encryption sample: the whole payload
 * (its metadata too) is encrypted, and the new payload says `encoding: binary/encrypted` and which key sealed it.
 *
 * Keys: CRONLEDGER_PAYLOAD_KEYS, or a file named by CRONLEDGER_PAYLOAD_KEYS_FILE, holding `id=base64key` entries
 * (separated by commas, spaces or lines; `#` starts a comment in the file). Each key is 32 random bytes
 * (`openssl rand -base64 32`). The first entry encrypts; every entry decrypts. Rotation: put a new key first and keep
 * the old ones listed for as long as histories sealed with them are read.
 *
 * Codecs run outside the workflow sandbox (the Worker's and Client's dataConverter), so workflow code is untouched.
 */

export const ENCRYPTED_ENCODING = 'binary/encrypted';
export const METADATA_KEY_ID = 'encryption-key-id';
export const PAYLOAD_KEYS_VARIABLE = 'CRONLEDGER_PAYLOAD_KEYS';
export const PAYLOAD_KEYS_FILE_VARIABLE = 'CRONLEDGER_PAYLOAD_KEYS_FILE';

const KEY_BYTES = 32;
const IV_BYTES = 12; // GCM's standard nonce, random per payload
const TAG_BYTES = 16;
const KEY_ID = /^[A-Za-z0-9._-]{1,64}$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

export interface PayloadKeys {
  /** The key that encrypts: the first one listed. */
  currentId: string;
  /** Every listed key by ID: any of them decrypts. */
  keys: ReadonlyMap<string, Buffer>;
}

/** Parses `id=base64key` entries; `source` names where they came from, for the error messages (never the key bytes). */
export function parsePayloadKeys(text: string, source: string): PayloadKeys {
  const entries = text
    .split('\n')
    .map((line) => line.replace(/#.*$/, ''))
    .join(' ')
    .split(/[\s,]+/)
    .filter(Boolean);
  if (entries.length === 0) throw new UserError(`${source} lists no key; give id=base64key entries, e.g. k1=$(openssl rand -base64 32)`);
  const keys = new Map<string, Buffer>();
  for (const [i, entry] of entries.entries()) {
    const eq = entry.indexOf('=');
    const id = eq < 0 ? '' : entry.slice(0, eq);
    const encoded = eq < 0 ? '' : entry.slice(eq + 1);
    // A bare key ("abc...=") splits at its padding: its own bytes would be the "ID", so it is named by position only.
    if (!KEY_ID.test(id) || encoded === '' || encoded.startsWith('=')) {
      throw new UserError(
        `${source}: entry ${i + 1} is not id=base64key with an ID of letters, digits, '.', '_' or '-' (up to 64); e.g. k1=$(openssl rand -base64 32)`,
      );
    }
    if (!BASE64.test(encoded)) throw new UserError(`${source}: key ${id} is not base64; make one with \`openssl rand -base64 32\``);
    const key = Buffer.from(encoded, 'base64');
    if (key.length !== KEY_BYTES) {
      throw new UserError(
        `${source}: key ${id} is ${key.length} bytes; AES-256 needs ${KEY_BYTES} (make one with \`openssl rand -base64 32\`)`,
      );
    }
    if (keys.has(id)) throw new UserError(`${source}: key ID ${id} is listed twice; each key needs its own ID`);
    keys.set(id, key);
  }
  return { currentId: entries[0].slice(0, entries[0].indexOf('=')), keys };
}

/** The configured keys, or undefined when neither variable is set (payloads then travel as they are). */
export function payloadKeysFromEnv(env: NodeJS.ProcessEnv = process.env): PayloadKeys | undefined {
  const text = secretSetting(PAYLOAD_KEYS_VARIABLE, env);
  if (text === undefined) return undefined;
  const file = env[PAYLOAD_KEYS_FILE_VARIABLE];
  return parsePayloadKeys(text, file ? `${PAYLOAD_KEYS_FILE_VARIABLE}=${file}` : PAYLOAD_KEYS_VARIABLE);
}

/** AES-256-GCM over the whole payload; the key ID is authenticated data, so a payload cannot be relabelled. */
export class EncryptionCodec implements PayloadCodec {
  constructor(private readonly payloadKeys: PayloadKeys) {}

  async encode(payloads: Payload[]): Promise<Payload[]> {
    const keyId = this.payloadKeys.currentId;
    const key = this.payloadKeys.keys.get(keyId)!;
    return payloads.map((payload) => {
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
      cipher.setAAD(Buffer.from(keyId, 'utf8'));
      const plain = temporal.api.common.v1.Payload.encode(payload).finish();
      const sealed = Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
      return {
        metadata: { [METADATA_ENCODING_KEY]: Buffer.from(ENCRYPTED_ENCODING), [METADATA_KEY_ID]: Buffer.from(keyId) },
        data: sealed,
      };
    });
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => {
      const encoding = payload.metadata?.[METADATA_ENCODING_KEY];
      if (!encoding || Buffer.from(encoding).toString('utf8') !== ENCRYPTED_ENCODING) return payload;
      const keyIdBytes = payload.metadata?.[METADATA_KEY_ID];
      if (!keyIdBytes) throw new Error(`an encrypted payload has no ${METADATA_KEY_ID} in its metadata`);
      const keyId = Buffer.from(keyIdBytes).toString('utf8');
      const key = this.payloadKeys.keys.get(keyId);
      if (!key) {
        throw new Error(
          `a payload is encrypted with key ID ${JSON.stringify(keyId)}, which is not among the configured keys ` +
            `(${[...this.payloadKeys.keys.keys()].join(', ')}); add it to ${PAYLOAD_KEYS_VARIABLE} or ${PAYLOAD_KEYS_FILE_VARIABLE}`,
        );
      }
      const data = Buffer.from(payload.data ?? new Uint8Array());
      if (data.length < IV_BYTES + TAG_BYTES) throw new Error(`an encrypted payload (key ID ${keyId}) is too short to be one`);
      const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, IV_BYTES), { authTagLength: TAG_BYTES });
      decipher.setAAD(Buffer.from(keyId, 'utf8'));
      decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
      let plain: Buffer;
      try {
        plain = Buffer.concat([decipher.update(data.subarray(IV_BYTES, data.length - TAG_BYTES)), decipher.final()]);
      } catch {
        throw new Error(`an encrypted payload does not authenticate under key ID ${keyId}: a different key with that ID, or altered data`);
      }
      return temporal.api.common.v1.Payload.decode(plain);
    });
  }
}

/** The data converter of every cronledger client and worker: encrypting when keys are configured, the SDK's default otherwise. */
export function payloadDataConverter(keys: PayloadKeys | undefined): DataConverter {
  return keys ? { payloadCodecs: [new EncryptionCodec(keys)] } : {};
}
