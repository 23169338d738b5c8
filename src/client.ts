import { Client, Connection } from '@temporalio/client';
import { loadClientConnectConfig } from '@temporalio/envconfig';
import { definedEnv, temporalTlsEnv, type Connections } from './config';
import { payloadDataConverter, payloadKeysFromEnv, type PayloadKeys } from './payload-codec';

export type TemporalTarget = Pick<Connections, 'temporalAddress' | 'namespace' | 'temporalTls'>;

/**
 * How to reach Temporal, for a Client's Connection and a Worker's NativeConnection alike: the address and namespace,
 * the stack's client certificate when it has one (`dev up --temporal server`), then whatever TEMPORAL_* the
 * environment sets (TLS, API key, profile; @temporalio/envconfig reads them).
 */
export function temporalConnectionOptions(conn: TemporalTarget) {
  return loadClientConnectConfig({
    overrideEnvVars: {
      ...temporalTlsEnv(conn.temporalTls),
      ...definedEnv(),
      TEMPORAL_ADDRESS: conn.temporalAddress,
      TEMPORAL_NAMESPACE: conn.namespace,
    },
  }).connectionOptions;
}

/**
 * A Temporal client for the resolved stack. TLS, API keys and profiles come from @temporalio/envconfig
 * (TEMPORAL_API_KEY, TEMPORAL_TLS_*, TEMPORAL_PROFILE), so the same code reaches a dev server or Temporal Cloud.
 * Payloads are encrypted with the keys of CRONLEDGER_PAYLOAD_KEYS(_FILE) when set (src/payload-codec.ts), unless
 * `payloadKeys` is given.
 */
export async function connectClient(conn: TemporalTarget, opts: { payloadKeys?: PayloadKeys } = {}): Promise<Client> {
  const dataConverter = payloadDataConverter(opts.payloadKeys ?? payloadKeysFromEnv());
  const connection = await Connection.connect(temporalConnectionOptions(conn));
  return new Client({ connection, namespace: conn.namespace, dataConverter });
}
