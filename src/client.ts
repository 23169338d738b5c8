import { Client, Connection } from '@temporalio/client';
import { loadClientConnectConfig } from '@temporalio/envconfig';
import { definedEnv, type Connections } from './config';
import { payloadDataConverter, payloadKeysFromEnv, type PayloadKeys } from './payload-codec';

/**
 * A Temporal client for the resolved stack. TLS, API keys and profiles come from @temporalio/envconfig
 * (TEMPORAL_API_KEY, TEMPORAL_TLS_*, TEMPORAL_PROFILE), so the same code reaches a dev server or Temporal Cloud.
 * Payloads are encrypted with the keys of CRONLEDGER_PAYLOAD_KEYS(_FILE) when set (src/payload-codec.ts), unless
 * `payloadKeys` is given.
 */
export async function connectClient(
  conn: Pick<Connections, 'temporalAddress' | 'namespace'>,
  opts: { payloadKeys?: PayloadKeys } = {},
): Promise<Client> {
  const dataConverter = payloadDataConverter(opts.payloadKeys ?? payloadKeysFromEnv());
  const config = loadClientConnectConfig({
    overrideEnvVars: { ...definedEnv(), TEMPORAL_ADDRESS: conn.temporalAddress, TEMPORAL_NAMESPACE: conn.namespace },
  });
  const connection = await Connection.connect(config.connectionOptions);
  return new Client({ connection, namespace: conn.namespace, dataConverter });
}
