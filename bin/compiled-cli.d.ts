/** The path of the compiled CLI for the current sources, compiled first if no build of them is cached. */
export function compiledCli(): Promise<string>;
