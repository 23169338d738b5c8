import { proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../activities';
import type { RollupRefreshResult } from '../reports/types';

const rollups = proxyActivities<Activities>({
  // a backlog (after an outage) drains in batches of 5,000 entries, each heartbeating
  startToCloseTimeout: '30 minutes',
  heartbeatTimeout: '2 minutes',
  retry: { initialInterval: '5 seconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 5 },
});

/**
 * Folds the rollup queues (ledger entries, run changes) into every tracked zone's rollups, and builds the month under
 * way (in its first minute, while it is nearly empty), so reports and the admin page read current rollups and no
 * report pays for a backlog or for building a month from the raw ledger. Started every minute by the `rollup-refresh` schedule;
 * one run drains everything queued, so overlapping runs are skipped. Deterministic: one activity, nothing else.
 */
export async function rollupRefresh(): Promise<RollupRefreshResult> {
  return rollups.foldRollupQueues();
}
