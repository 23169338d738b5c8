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
 * Whether pid is alive and still the process we started. Pids are reused (after a reboot, or just after the process
 * exited), so the command line must contain every marker (each names this stack's data dir or a file in it), and
 * when the start time was recorded it must match too. Without /proc (macOS) only liveness is checked.
 */
export function isOurProcess(pid: number, markers: string[], startTime?: string): boolean {
  if (!processExists(pid)) return false;
  if (!existsSync('/proc/self/cmdline')) return true;
  try {
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
    if (!markers.every((m) => cmdline.includes(m))) return false;
    return startTime === undefined || processStartTime(pid) === startTime;
  } catch {
    return false;
  }
}

/**
 * When pid started, as `<boot id>:<clock ticks since boot>` (field 22 of /proc/<pid>/stat): unique to one process
 * across pid reuse and reboots. Undefined without /proc.
 */
export function processStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // the name may contain spaces; fields start at 3
    const bootId = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    return `${bootId}:${fields[22 - 3]}`;
  } catch {
    return undefined;
  }
}

/** Starts a process in its own process group, stdout and stderr appended to logFile, and lets this one exit. */
export function spawnDetached(
  command: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv; logFile: string; banner: string },
): Promise<number> {
  appendFileSync(opts.logFile, `\n--- ${new Date().toISOString()} ${opts.banner}\n`, { mode: 0o600 });
  const fd = openSync(opts.logFile, 'a', 0o600);
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
