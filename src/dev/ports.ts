import { createServer } from 'node:net';

/** Local TCP ports for the stack. Everything binds 127.0.0.1 only: a dev stack has no business on the network. */
export const LOCALHOST = '127.0.0.1';

/** Whether port can be bound on 127.0.0.1 right now (also false when something holds it on 0.0.0.0). */
export function isPortFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen({ port, host: LOCALHOST, exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/** A port the kernel considers free now. Another process could take it before we bind it; that is rare and fails loudly. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen({ port: 0, host: LOCALHOST, exclusive: true }, () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** n distinct free ports. */
export async function freePorts(n: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < n) ports.add(await freePort());
  return [...ports];
}

/**
 * n distinct ports free now in [low, high], tried at random. For ports the kernel would never hand out by itself
 * (freePort gives ephemeral ones, 32768 and up on Linux), such as Temporal's membership ports, which its SQL
 * schema keeps in a smallint.
 */
export async function freePortsInRange(n: number, low: number, high: number): Promise<number[]> {
  const ports = new Set<number>();
  for (let tries = 0; ports.size < n; tries++) {
    if (tries > 1000) throw new Error(`no ${n} free ports between ${low} and ${high} on ${LOCALHOST}`);
    const port = low + Math.floor(Math.random() * (high - low + 1));
    if (!ports.has(port) && (await isPortFree(port))) ports.add(port);
  }
  return [...ports];
}

/**
 * n distinct ports a restart can count on: below Linux's ephemeral range (32768 and up), which the kernel hands out as
 * the local port of outgoing connections. A server stopped and started again on its recorded ports (a Temporal
 * restart on the same persistence) otherwise found one of them held by some process's connection meanwhile.
 */
export const stablePorts = (n: number): Promise<number[]> => freePortsInRange(n, 20_000, 32_767);
