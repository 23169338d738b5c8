import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { repoRoot } from '../../src/config';

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

const CLI_TIMEOUT_MS = 110_000; // below vitest's testTimeout, so a hang fails with the output so far

/** Runs `node bin/cronledger.js ...args` exactly as a user would. Resolves whatever the exit code; a non-zero exit is a result to assert on. */
export function runCli(args: string[], env: NodeJS.ProcessEnv = process.env): Promise<CliResult> {
  const child = spawn(process.execPath, [join(repoRoot(), 'bin', 'cronledger.js'), ...args], {
    cwd: repoRoot(),
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  return whenExited(
    child,
    (code) => ({ code, stdout, stderr }),
    () => `cronledger ${args.join(' ')} did not finish within ${CLI_TIMEOUT_MS} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`,
  );
}

/** Resolves with `result(exit code)` when the child closes; kills it and rejects with `timedOut()` after CLI_TIMEOUT_MS. */
function whenExited<T>(child: ChildProcess, result: (code: number | null) => T, timedOut: () => string): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(timedOut()));
    }, CLI_TIMEOUT_MS);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve(result(code));
    });
  });
}

const shellQuoted = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * Runs the CLI on a real pseudo-terminal (util-linux `script`), so stdin and stdout are TTYs as for a person at a
 * keyboard, and types `answer` and Enter once the output shows `prompt`. The terminal merges stdout and stderr.
 */
export function runCliOnTerminal(
  args: string[],
  env: NodeJS.ProcessEnv,
  dialogue: { prompt: string; answer: string },
): Promise<{ code: number | null; output: string; asked: boolean }> {
  const command = [process.execPath, join(repoRoot(), 'bin', 'cronledger.js'), ...args].map(shellQuoted).join(' ');
  const child = spawn('script', ['--quiet', '--return', '--command', command, '/dev/null'], {
    cwd: repoRoot(),
    env,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let output = '';
  let asked = false;
  child.stdout.on('data', (chunk: Buffer) => {
    output += chunk.toString('utf8');
    if (!asked && output.includes(dialogue.prompt)) {
      asked = true;
      child.stdin.write(`${dialogue.answer}\r`);
    }
  });
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  return whenExited(
    child,
    (code) => ({ code, output, asked }),
    () => `cronledger ${args.join(' ')} on a terminal did not finish within ${CLI_TIMEOUT_MS} ms\noutput:\n${output}`,
  );
}
