import { spawn } from 'node:child_process';
import { appendFileSync, closeSync, existsSync, openSync, readFileSync } from 'node:fs';

/**
 * Background processes that outlive the command that started them (`dev up` returns, Temporal keeps running),
 * found again later through the pids recorded in stack.json.
 */

export function processExists(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  return !isZombie(pid);
}

/** A killed child that its parent has not reaped yet still answers kill(pid, 0), but it is gone. */
function isZombie(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return false;
  }
}

/**
 * Whether pid is alive and still the process we started: pids are reused after a reboot, so the command line
 * must contain every marker. Without /proc (macOS) only liveness is checked.
 */
export function isOurProcess(pid: number, markers: string[]): boolean {
  if (!processExists(pid)) return false;
  const path = `/proc/${pid}/cmdline`;
  if (!existsSync('/proc/self/cmdline')) return true;
  try {
    const cmdline = readFileSync(path, 'utf8').split('\0').join(' ');
    return markers.every((m) => cmdline.includes(m));
  } catch {
    return false;
  }
}

/** Starts a process in its own process group, stdout and stderr appended to logFile, and lets this one exit. */
export function spawnDetached(
  command: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv; logFile: string; banner: string },
): Promise<number> {
  appendFileSync(opts.logFile, `\n--- ${new Date().toISOString()} ${opts.banner}\n`);
  const fd = openSync(opts.logFile, 'a');
  try {
    const child = spawn(command, args, { cwd: opts.cwd, env: opts.env, detached: true, stdio: ['ignore', fd, fd] });
    return new Promise((resolve, reject) => {
      child.once('error', (err) => reject(new Error(`could not start ${command}: ${err.message}`)));
      child.once('spawn', () => {
        child.unref();
        resolve(child.pid as number);
      });
    });
  } finally {
    closeSync(fd);
  }
}

/** SIGTERM (to the whole group, so children go too), then SIGKILL if it has not exited within graceMs. */
export async function stopProcess(pid: number, graceMs: number): Promise<void> {
  signal(pid, 'SIGTERM');
  if (await waitForExit(pid, graceMs)) return;
  signal(pid, 'SIGKILL');
  await waitForExit(pid, 5_000);
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pid, sig);
  } catch {
    try {
      process.kill(pid, sig); // not a group leader after all
    } catch {
      // already gone
    }
  }
}

export async function waitForExit(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (processExists(pid)) {
    if (Date.now() > deadline) return false;
    await sleep(100);
  }
  return true;
}

/** The end of a log file, for error messages that say why something did not start. */
export function logTail(file: string, lines = 15): string {
  try {
    const text = readFileSync(file, 'utf8').trimEnd().split('\n');
    return text.slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
