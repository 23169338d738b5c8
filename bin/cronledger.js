#!/usr/bin/env node
// Runs the CLI compiled from src/ (bin/compiled.js: compiled on the first call after src/ changes, so there is no build
// step to forget), or through tsx where no build can be written (a read-only checkout).
import { runCompiled } from './compiled.js';

await runCompiled('main');
