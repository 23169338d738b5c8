/** The path of the compiled CLI for the current sources, compiled first if no build of them is cached. */
export function compiledCli(): Promise<string>;
/** The path of the compiled worker (src/worker.ts) for the current sources, compiled first if no build of them is cached. */
export function compiledWorker(): Promise<string>;
