import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * Four projects. `npm test` runs unit and integration; scripts/test.sh (and so CI) runs all four in one vitest run:
 * - unit: no servers and no global setup; plain logic and files (money, cron validation, the layer rule, compose).
 * - integration: against one real Temporal dev server and PostgreSQL (test/support/global-setup.ts).
 * - fault: the fault-injection scenarios R1-R4 in short form (bench/chaos.ts runs the long ones), on the same stack.
 * - temporal-server: the scheduling tests and the payload codec's again, on the Temporal server on PostgreSQL
 *   (`dev up --temporal server`, mutual TLS on its frontend).
 */
const STACK = { globalSetup: ['test/support/global-setup.ts'], setupFiles: ['test/support/quiet-runtime.ts'] };
// ...and the payload codec's test: encrypted payloads through the Temporal server, its client certificate on every caller.
const SCHEDULING = ['test/exactly-once.test.ts', 'test/backfill.test.ts', 'test/missed-slots.test.ts', 'test/payload-encryption.test.ts'];

/**
 * Files start in this order of projects, each project's files in vitest's own order (longest last time first, else
 * largest first). The fault scenarios and the scheduling tests on the Temporal server mostly wait (on outages, kills and
 * minute boundaries), so they go first: their waits then overlap the other files instead of ending the run.
 */
const PROJECT_ORDER = ['fault', 'temporal-server', 'integration', 'unit'];
class ProjectOrder extends BaseSequencer {
  async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (f: TestSpecification) => PROJECT_ORDER.indexOf(f.project.name);
    return (await super.sort(files)).sort((a, b) => rank(a) - rank(b));
  }
}

export default defineConfig({
  test: {
    // Tests talk to real servers and some wait for real minute boundaries.
    testTimeout: 120_000,
    hookTimeout: 180_000,
    teardownTimeout: 60_000,
    // Workers and native connections are happier in processes than in threads. Three files at a time on two cores: most
    // files spend their time waiting (on minute boundaries, outages, kills), and with two the cores were half idle.
    pool: 'forks',
    maxWorkers: 3,
    sequence: { sequencer: ProjectOrder },
    // The default reporter, then every file by duration (test/support/durations-reporter.ts); the project-end reporter
    // stops each test stack once no project needs it (test/support/project-end-reporter.ts).
    reporters: ['default', './test/support/durations-reporter.ts', './test/support/project-end-reporter.ts'],
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts'] } },
      { extends: true, test: { name: 'integration', include: ['test/*.test.ts'], ...STACK } },
      { extends: true, test: { name: 'fault', include: ['test/fault/**/*.test.ts'], ...STACK } },
      {
        extends: true,
        test: { name: 'temporal-server', include: SCHEDULING, ...STACK, env: { CRONLEDGER_TEST_TEMPORAL: 'server' } },
      },
    ],
  },
});
