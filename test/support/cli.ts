import { spawn } from 'node:child_process';
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
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(repoRoot(), 'bin', 'cronledger.js'), ...args], {
      cwd: repoRoot(),
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`cronledger ${args.join(' ')} did not finish within ${CLI_TIMEOUT_MS} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`));
    }, CLI_TIMEOUT_MS);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}
