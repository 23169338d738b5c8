import { randomBytes } from 'node:crypto';
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { readStackFile, stackFilePath, type StackFile } from '../config';
import { UserError } from '../errors';

/**
 * Writing stack.json. Each part records its pid the moment it is spawned, so `dev down` can always find what a
 * half-finished `dev up` left running. Writes are whole-file renames (readers never see half a file), mode 0600
 * because the file holds the roles' passwords. The temporary file has a random name and is created exclusively
 * (O_EXCL: a symlink or file planted at that name fails the write instead of being followed or reused).
 */
export function writeStackFile(dir: string, stack: StackFile): void {
  const path = stackFilePath(dir);
  const tmp = `${path}.${randomBytes(8).toString('hex')}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(stack, null, 2)}\n`, { mode: 0o600, flag: 'wx' });
  try {
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
}

/** Read, change, write in one synchronous step, so parts starting concurrently never undo each other's updates. */
export function updateStackFile(dir: string, change: (stack: StackFile) => void): StackFile {
  const stack = requireStackFile(dir);
  change(stack);
  writeStackFile(dir, stack);
  return stack;
}

export function requireStackFile(dir: string): StackFile {
  const stack = readStackFile(dir);
  if (!stack) throw new UserError(`no stack in ${dir} (no ${stackFilePath(dir)}); start one with \`npx cronledger dev up\``);
  return stack;
}
