import type { Client, ScheduleOptions } from '@temporalio/client';
import { MANAGED_BY_MEMO_KEY, MANAGED_BY_VALUE, RECONCILE_SCHEDULE_ID } from '../constants';
import { UserError } from '../errors';
import { fingerprintOf } from '../hash';
import { MAX_DAYS } from '../reconcile/days';
import { reconcileDaily, type ReconcileDailyInput } from '../workflows/reconcile-daily';
import { describeOrUndefined } from './describe-schedule';
import { reconcileSchedule } from './reconcile-schedule';
import { isManagedSchedule } from './schedule-memos';

const KIND = 'reconcile';
const PROVIDERS = ['openai', 'anthropic'] as const;

export interface ReconcileDailySettings extends Required<ReconcileDailyInput> {
  /** The UTC time of day it fires. */
  hour: number;
  minute: number;
}

/** `--providers openai,anthropic`, each once, or a UserError naming the value and the fix. */
export function parseProviders(text: string): ReconcileDailyInput['providers'] {
  const names = text.split(',').map((s) => s.trim());
  for (const name of names) {
    if (!(PROVIDERS as readonly string[]).includes(name)) {
      throw new UserError(
        `--providers ${JSON.stringify(text)}: ${JSON.stringify(name)} is not a provider; name openai, anthropic or both (openai,anthropic)`,
      );
    }
  }
  return PROVIDERS.filter((p) => names.includes(p));
}

/** `--at HH:MM` (UTC, 24-hour), or a UserError naming the value and the fix. */
export function parseAt(text: string): { hour: number; minute: number } {
  const m = /^(\d{2}):(\d{2})$/.exec(text);
  const [hour, minute] = m ? [Number(m[1]), Number(m[2])] : [NaN, NaN];
  if (!(hour <= 23 && minute <= 59))
    throw new UserError(`--at ${JSON.stringify(text)} is not a time of day; write it as HH:MM in UTC, e.g. 04:30`);
  return { hour, minute };
}

/** `--days N`, a whole number from 1 to MAX_DAYS, or a UserError naming the value and the fix. */
export function parseDays(text: string): number {
  const days = /^\d+$/.test(text) ? Number(text) : NaN;
  if (!(days >= 1 && days <= MAX_DAYS)) {
    throw new UserError(
      `--days ${JSON.stringify(text)} is not a number of days; give a whole number from 1 to ${MAX_DAYS} (e.g. 3 to catch a provider reporting late)`,
    );
  }
  return days;
}

const cronOf = (s: ReconcileDailySettings): string => `${s.minute} ${s.hour} * * *`;

const fingerprint = (s: ReconcileDailySettings, taskQueue: string): string =>
  fingerprintOf({ cron: cronOf(s), providers: s.providers, days: s.days, taskQueue, workflowType: reconcileDaily.name, version: 1 });

const NOT_OURS = `schedule ${RECONCILE_SCHEDULE_ID} exists but was not created by cronledger; delete it yourself (temporal schedule delete --schedule-id ${RECONCILE_SCHEDULE_ID})`;

/**
 * The `reconcile-daily` schedule: reconcileDaily at HH:MM UTC every day, each start named `reconcile-daily-<nominal
 * time>`. A start that finds the previous one still running waits for it (BUFFER_ONE); a day missed while the server was
 * down is caught up within a day (the next run's days overlap anyway when days > 1).
 */
export function reconcileDailyScheduleOptions(s: ReconcileDailySettings, taskQueue: string): ScheduleOptions {
  const input: ReconcileDailyInput = { providers: s.providers, days: s.days };
  return {
    scheduleId: RECONCILE_SCHEDULE_ID,
    spec: { cronExpressions: [cronOf(s)], timezone: 'UTC' },
    action: {
      type: 'startWorkflow',
      workflowType: reconcileDaily,
      workflowId: RECONCILE_SCHEDULE_ID,
      taskQueue,
      args: [input],
      memo: { fingerprint: fingerprint(s, taskQueue) },
    },
    policies: { overlap: 'BUFFER_ONE', catchupWindow: '1 day' },
    state: { note: 'managed by cronledger (reconcile schedule)' },
    memo: { [MANAGED_BY_MEMO_KEY]: MANAGED_BY_VALUE, kind: KIND },
  };
}

/**
 * Creates or updates the `reconcile-daily` schedule. Running it again with the same settings changes nothing; a
 * schedule of that ID that cronledger did not create is never touched; a paused one stays paused.
 */
export async function ensureReconcileDailySchedule(
  client: Client,
  s: ReconcileDailySettings,
  taskQueue: string,
): Promise<'created' | 'updated' | 'unchanged'> {
  const reconciled = await reconcileSchedule(client, {
    options: reconcileDailyScheduleOptions(s, taskQueue),
    fingerprint: fingerprint(s, taskQueue),
    kind: KIND,
    notOurs: NOT_OURS,
  });
  return reconciled.outcome;
}

/** Deletes the `reconcile-daily` schedule if cronledger created it: 'absent' when there is none. */
export async function deleteReconcileDailySchedule(client: Client): Promise<'deleted' | 'absent'> {
  const current = await describeOrUndefined(client, RECONCILE_SCHEDULE_ID);
  if (!current) return 'absent';
  if (!isManagedSchedule(current.memo, KIND)) throw new UserError(NOT_OURS);
  await client.schedule.getHandle(RECONCILE_SCHEDULE_ID).delete();
  return 'deleted';
}
