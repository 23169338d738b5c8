import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { UserError } from './errors';

/**
 * The files an operator hands to a command (tasks, budgets, prices) are read whole and validated before anything is
 * written, so each has a cap in bytes and one in entries: a runaway file fails at once with a message naming the
 * file, the cap and the fix, instead of filling memory or starting thousands of schedules.
 */
export interface InputFileKind {
  /** As the messages name it: "tasks file". */
  name: string;
  maxBytes: number;
  /** What the message advises when the file is too large. */
  fix: string;
}

const MiB = 1024 * 1024;
const count = (n: number): string => n.toLocaleString('en-US');

export const TASKS_FILE: InputFileKind = {
  name: 'tasks file',
  maxBytes: 16 * MiB,
  fix: 'keep task inputs short (a task names its prompt, it is not a document store)',
};
export const BUDGETS_FILE: InputFileKind = {
  name: 'budgets file',
  maxBytes: 16 * MiB,
  fix: 'give the users without a budget of their own the "default" budget instead of one entry each',
};
/** LiteLLM's whole price table (several MB), read by `prices import --litellm`. */
export const LITELLM_FILE: InputFileKind = {
  name: 'LiteLLM prices file',
  maxBytes: 64 * MiB,
  fix: "give LiteLLM's model_prices_and_context_window.json",
};

export const PRICES_FILE: InputFileKind = {
  name: 'prices file',
  maxBytes: 1 * MiB,
  fix: 'list only the versions still to apply: published versions stay in the database',
};

export const RATE_LIMITS_FILE: InputFileKind = {
  name: 'rate limits file',
  maxBytes: 1 * MiB,
  fix: 'give limits per model, not per caller (a provider limits an organisation per model)',
};

/**
 * Reads a file as UTF-8, at most kind.maxBytes (a FIFO or /dev/zero is cut off there too). Bytes that are not UTF-8
 * are refused rather than replaced with U+FFFD, which could make two different user IDs one.
 */
export function readInputFile(path: string, kind: InputFileKind): string {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    throw new UserError(`cannot read ${kind.name} ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  const tooLarge = (size: string) =>
    new UserError(`${kind.name} ${path} is ${size}; the cap is ${count(kind.maxBytes)} bytes (${kind.maxBytes / MiB} MiB): ${kind.fix}`);
  try {
    const stat = fstatSync(fd);
    if (stat.isDirectory()) throw new UserError(`cannot read ${kind.name} ${path}: EISDIR`);
    if (stat.isFile() && stat.size > kind.maxBytes) throw tooLarge(`${count(stat.size)} bytes`);
    const buffer = Buffer.alloc(kind.maxBytes + 1);
    let length = 0;
    for (let n = -1; n !== 0 && length < buffer.length; length += n) n = readSync(fd, buffer, length, buffer.length - length, null);
    if (length > kind.maxBytes) throw tooLarge('larger than that');
    try {
      return new TextDecoder('utf-8', { fatal: true }).decode(buffer.subarray(0, length));
    } catch {
      throw new UserError(`${kind.name} ${path} is not UTF-8 text; save it as UTF-8`);
    }
  } finally {
    closeSync(fd);
  }
}

/** Refuses more than max entries of one kind, before any of them is applied. */
export function checkEntryCap(where: string, what: string, entries: number, max: number, fix: string): void {
  if (entries > max) throw new UserError(`${where} has ${count(entries)} ${what}; the cap is ${count(max)}: ${fix}`);
}
