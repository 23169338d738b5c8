import type { ConnectionOptions } from '@temporalio/client';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { repoRoot, TEMPORAL_TLS_SERVER_NAME, type StackFile, type TemporalTls } from '../config';
import { UserError } from '../errors';
import { childEnvironment } from './child-env';

/**
 * `dev up --temporal server` runs the frontend with mutual TLS, as docker-compose.yml does: the same script
 * (deploy/temporal/make-certs.sh, openssl) makes a CA, the frontend's certificate and the client certificate into
 * <data dir>/temporal-tls, and every process of the stack presents the client certificate. The dev server
 * (`temporal server start-dev`) stays on loopback without TLS.
 */

export const MAKE_CERTS_SCRIPT = join(repoRoot(), 'deploy', 'temporal', 'make-certs.sh');

export const temporalTlsOf = (dataDir: string): TemporalTls => ({
  dir: join(dataDir, 'temporal-tls'),
  serverName: TEMPORAL_TLS_SERVER_NAME,
});

const execFileAsync = promisify(execFile);

/** Makes the certificates unless valid ones are there (the script keeps them while each has 30 days left). */
export async function ensureTemporalCertificates(tls: TemporalTls): Promise<void> {
  try {
    await execFileAsync('sh', [MAKE_CERTS_SCRIPT, tls.dir], { env: childEnvironment([], {}) });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    const detail = (e.stderr || e.message).trim().split('\n').slice(-5).join('\n');
    throw new UserError(
      `could not make the Temporal TLS certificates in ${tls.dir} with ${MAKE_CERTS_SCRIPT}:\n${detail}\n` +
        'The script needs openssl (Debian: `apt-get install openssl`).',
    );
  }
}

/** What `dev` itself connects to its own frontend with: the stack's client certificate in server mode, nothing else. */
export function stackConnectionOptions(stack: StackFile): Pick<ConnectionOptions, 'address' | 'tls'> {
  const tls = stack.temporal.tls;
  if (!tls) return { address: stack.temporal.address };
  return {
    address: stack.temporal.address,
    tls: {
      serverNameOverride: tls.serverName,
      serverRootCACertificate: readFileSync(join(tls.dir, 'ca.crt')),
      clientCertPair: { crt: readFileSync(join(tls.dir, 'client.crt')), key: readFileSync(join(tls.dir, 'client.key')) },
    },
  };
}
