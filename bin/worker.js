#!/usr/bin/env node
// The worker process (src/worker.ts), compiled as bin/cronledger.js runs the CLI (bin/compiled.js).
import { runCompiled } from './compiled.js';

await runCompiled('worker');
