import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // One real Temporal dev server and PostgreSQL for the run; see test/support/global-setup.ts.
    globalSetup: ['test/support/global-setup.ts'],
    setupFiles: ['test/support/quiet-runtime.ts'],
    // Tests talk to real servers and some wait for real minute boundaries.
    testTimeout: 120_000,
    hookTimeout: 180_000,
    teardownTimeout: 60_000,
    // Workers and native connections are happier in processes than in threads; two files at a time fit two cores.
    pool: 'forks',
    maxWorkers: 2,
  },
});
