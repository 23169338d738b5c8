import { proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { ProviderImport, ReconcileActivities } from '../activities/reconcile-activities';
import { reconcileTaskQueue } from '../constants';

export interface ReconcileDailyInput {
  providers: ('openai' | 'anthropic')[];
  /** How many days before today (UTC) to reconcile, ending yesterday: more than 1 catches a provider reporting late. Default 1. */
  days?: number;
}

export interface ReconcileDailyResult {
  from: string;
  to: string;
  imports: ProviderImport[];
}

const DAY_MS = 86_400_000;
const dayOf = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

/**
 * Reconciles the last `days` UTC days before the workflow's start (its clock, recorded in history) against each
 * provider's reports, one provider after another. Started daily by the `reconcile-daily` schedule. Each activity runs
 * on the reconcile worker's own task queue, the only process with the operator URL and the admin keys. Deterministic:
 * the days come from workflow time, then one activity per provider.
 */
export async function reconcileDaily(input: ReconcileDailyInput): Promise<ReconcileDailyResult> {
  const { reconcileProvider } = proxyActivities<ReconcileActivities>({
    taskQueue: reconcileTaskQueue(workflowInfo().taskQueue),
    // reading a year of report pages is the slow part; a worker that is down leaves the task queued until it is back
    startToCloseTimeout: '30 minutes',
    scheduleToCloseTimeout: '1 day',
    retry: { initialInterval: '30 seconds', backoffCoefficient: 2, maximumInterval: '30 minutes', nonRetryableErrorTypes: ['UserError'] },
  });
  const today = Math.floor(Date.now() / DAY_MS) * DAY_MS;
  const from = dayOf(today - (input.days ?? 1) * DAY_MS);
  const to = dayOf(today - DAY_MS);
  const imports: ProviderImport[] = [];
  for (const provider of input.providers) imports.push(await reconcileProvider({ provider, from, to }));
  return { from, to, imports };
}
