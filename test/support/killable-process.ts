import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';

const children = new Set<ChildProcess>();
// A test that fails half-way must not leave servers or workers behind.
process.once('exit', () => {
  for (const child of children) child.kill('SIGKILL');
});

/** A child process (a worker, a Temporal server) that a fault-injection scenario kills and starts again. */
export class KillableProcess {
  private child?: ChildProcess;
  private exited?: Promise<void>;

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Spawns command with stdout and stderr appended to logFile. */
  protected spawnLogged(command: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv; logFile: string }): void {
    const fd = openSync(opts.logFile, 'a');
    try {
      const child = spawn(command, args, { cwd: opts.cwd, env: opts.env, stdio: ['ignore', fd, fd] });
      this.child = child;
      children.add(child);
      this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
      void this.exited.then(() => children.delete(child));
    } finally {
      closeSync(fd);
    }
  }

  /** SIGKILL: no shutdown, nothing flushed or said goodbye to. Resolves once the process is gone, with the kill time. */
  protected async sigkill(): Promise<number> {
    if (!this.child || !this.running) throw new Error('the process is not running');
    const at = Date.now();
    this.child.kill('SIGKILL');
    await this.exited;
    return at;
  }

  /** SIGTERM (a clean shutdown), then SIGKILL if it is still there after graceMs. */
  protected async terminate(graceMs: number): Promise<void> {
    if (!this.running) return;
    this.child?.kill('SIGTERM');
    const timeout = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), graceMs).unref());
    if ((await Promise.race([this.exited, timeout])) === 'timeout') {
      this.child?.kill('SIGKILL');
      await this.exited;
    }
  }
}
