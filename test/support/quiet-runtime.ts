import { DefaultLogger, Runtime } from '@temporalio/worker';

// Workers in tests log at WARN: INFO state changes from dozens of workers bury the failures that matter.
try {
  Runtime.install({ logger: new DefaultLogger('WARN') });
} catch {
  // already installed in this process by an earlier test file
}
