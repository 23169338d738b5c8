import { createHash } from 'node:crypto';

/** SHA-256 of a text (UTF-8), as lowercase hex, or base64 for the places that want it (CSP hashes). */
export const sha256 = (text: string, encoding: 'hex' | 'base64' = 'hex'): string =>
  createHash('sha256').update(text, 'utf8').digest(encoding);

/**
 * JSON with every object's keys sorted, at every depth, so that equal values give equal text whatever the order their
 * keys were written in. (JSON.stringify's key-array form is not this: the array filters nested objects' keys too.)
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v !== null && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

/** A short stable digest of a value's canonical JSON: equal values, equal fingerprints. */
export const fingerprintOf = (value: unknown): string => sha256(canonicalJson(value)).slice(0, 32);
