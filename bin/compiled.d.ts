/** The path of the compiled CLI for the current sources, compiled first if no build of them is cached. */
export function compiledCli(): Promise<string>;
/** The path of the compiled worker (src/worker.ts) for the current sources, compiled first if no build of them is cached. */
export function compiledWorker(): Promise<string>;
/** Compiles one more TypeScript entry point into `outdir` as the CLI and the worker are compiled; returns the compiled file's path. */
export function compileScript(sourcePath: string, outdir: string): Promise<string>;
