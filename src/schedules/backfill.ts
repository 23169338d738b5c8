import {
  WorkflowExecutionAlreadyStartedError,
  WorkflowFailedError,
  type Client,
  type ScheduleDescription,
} from '@temporalio/client';
import { UserError } from '../errors';
import { describeTaskSchedule } from './describe-schedule';
import { appliedTaskOf, runInputOf, scheduleOptionsFor } from './task-schedule';
import type { Task } from '../tasks/tasks-file';
import { scheduledRun } from '../workflows/scheduled-run';
import { slotTimes } from './slot-times';

/** A backfill longer than this is refused: a typo in a year should not start a year of model calls. */
export const MAX_BACKFILL_DAYS = 31;
export const MAX_BACKFILL_SLOTS = 5_000;
const START_CONCURRENCY = 16;

export type SlotOutcome = 'executed' | 'rejected' | 'claimed' | 'failed';

export interface SlotResult {
  taskId: string;
  /** Nominal time of the slot, RFC3339 UTC seconds, exactly as the schedule would stamp it. */
  slot: string;
  workflowId: string;
  outcome: SlotOutcome;
  detail?: string;
}

export interface BackfillSummary {
  slots: number;
  executed: number;
  alreadyRan: number;
  rejected: number;
  claimed: number;
  failed: number;
}

export function parseRange(fromText: string, toText: string): { from: Date; to: Date } {
  const parse = (text: string, flag: string): Date => {
    const iso = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/;
    const date = new Date(text);
    if (!iso.test(text) || Number.isNaN(date.getTime())) {
      throw new UserError(`${flag} ${JSON.stringify(text)} is not an ISO 8601 time with a zone; write it like 2026-11-02T08:58:00Z`);
    }
    return date;
  };
  const from = parse(fromText, '--from');
  const to = parse(toText, '--to');
  if (from > to) throw new UserError(`--from ${fromText} is after --to ${toText}; swap them`);
  if (to.getTime() - from.getTime() > MAX_BACKFILL_DAYS * 86_400_000) {
    throw new UserError(`the range ${fromText} .. ${toText} is longer than ${MAX_BACKFILL_DAYS} days; backfill it in smaller windows`);
  }
  return { from, to };
}

export const nominalId = (slot: Date): string => slot.toISOString().replace(/\.\d{3}Z$/, 'Z');

export interface BackfillOptions {
  taskIds: string[];
  from: Date;
  to: Date;
  onSlotDone?: (result: SlotResult, done: number, total: number) => void;
}

/**
 * Starts every slot of the range under the schedule's exact workflow ID with REJECT_DUPLICATE, so Temporal refuses
 * a slot whose run already exists, then waits for each run. A run that finds its slot claimed ends as duplicate.
 */
export async function backfill(client: Client, opts: BackfillOptions): Promise<{ results: SlotResult[]; summary: BackfillSummary }> {
  const plan: { task: Task; description: ScheduleDescription; slot: Date }[] = [];
  for (const taskId of opts.taskIds) {
    const description = await describeTaskSchedule(client, taskId);
    const applied = appliedTaskOf(description);
    if (!applied) throw new UserError(`schedule for task "${taskId}" has no task memo; run \`cronledger tasks apply FILE\` again`);
    for (const slot of await slotTimes(client, description.scheduleId, opts.from, opts.to)) {
      plan.push({ task: applied.task, description, slot });
    }
  }
  if (plan.length > MAX_BACKFILL_SLOTS) {
    throw new UserError(`the range holds ${plan.length} slots, more than ${MAX_BACKFILL_SLOTS}; backfill a shorter range or fewer tasks`);
  }

  const results: SlotResult[] = new Array(plan.length);
  let next = 0;
  let done = 0;
  const startNext = async () => {
    while (next < plan.length) {
      const i = next++;
      results[i] = await runSlot(client, plan[i].task, plan[i].description, plan[i].slot);
      opts.onSlotDone?.(results[i], ++done, plan.length);
    }
  };
  await Promise.all(Array.from({ length: Math.min(START_CONCURRENCY, plan.length) }, startNext));
  return { results, summary: summarise(results) };
}

async function runSlot(client: Client, task: Task, description: ScheduleDescription, slot: Date): Promise<SlotResult> {
  const action = description.action;
  const workflowId = `${action.workflowId}-${nominalId(slot)}`;
  const base = { taskId: task.id, slot: nominalId(slot), workflowId };
  // Start exactly what the schedule would: its task queue, argument, memo and search attributes.
  const desired = scheduleOptionsFor(task, action.taskQueue).action;
  try {
    const handle = await client.workflow.start(scheduledRun, {
      workflowId,
      taskQueue: action.taskQueue,
      args: [runInputOf(task)],
      memo: desired.memo,
      typedSearchAttributes: desired.typedSearchAttributes,
      workflowIdReusePolicy: 'REJECT_DUPLICATE',
    });
    const result = await handle.result();
    return { ...base, outcome: result.status === 'duplicate' ? 'claimed' : 'executed' };
  } catch (err) {
    if (err instanceof WorkflowExecutionAlreadyStartedError) return { ...base, outcome: 'rejected' };
    if (err instanceof WorkflowFailedError) {
      return { ...base, outcome: 'failed', detail: err.cause?.message ?? err.message };
    }
    throw err;
  }
}

function summarise(results: SlotResult[]): BackfillSummary {
  const count = (o: SlotOutcome) => results.filter((r) => r.outcome === o).length;
  const rejected = count('rejected');
  const claimed = count('claimed');
  return { slots: results.length, executed: count('executed'), alreadyRan: rejected + claimed, rejected, claimed, failed: count('failed') };
}
