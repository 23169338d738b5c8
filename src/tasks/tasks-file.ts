import { z } from 'zod';
import { DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL, DEFAULT_MAX_OUTPUT_TOKENS } from '../constants';
import { UserError } from '../errors';
import { checkEntryCap, readInputFile, TASKS_FILE } from '../input-file';
import { USER_ID_RULE, userIdProblem } from '../ledger/user-id';
import { quoted } from '../text-table';
import { parseUsd, toAttoUsd } from '../money';
import { validateTimeZone } from '../time-zone';
import { validateCron } from './cron';
import { parseDuration } from './duration';
import { SERVICE_TIERS } from '../models/provider';
import { simulateSchema } from '../models/simulate-profile';
import { budgetChangesOf, budgetsSectionSchema, downgradeSectionSchema } from '../budgets/budget-file';

/** A USD amount above 0, as a decimal string (never a JSON number: money is exact), e.g. "0.05". */
const positiveUsd = z.unknown().superRefine((value, ctx) => {
  const problem =
    typeof value !== 'string'
      ? `${JSON.stringify(value)} is not a decimal string: write it in quotes, e.g. "0.05" (USD)`
      : usdProblem(value);
  if (problem) ctx.addIssue({ code: 'custom', message: problem });
}) as unknown as z.ZodType<string>;

function usdProblem(text: string): string | undefined {
  try {
    if (toAttoUsd(parseUsd(text, 'maxCostPerRun')) <= 0n)
      return `${text} is not above 0: the cap is the most one run may cost, e.g. "0.05" (USD)`;
  } catch (err) {
    if (err instanceof UserError) return err.message;
    throw err;
  }
  return undefined;
}

const duration = z.string().refine((s) => parseDuration(s) !== undefined, {
  message: 'must be a duration like "30s", "10m" or "1h"',
});

export const taskSchema = z
  .object({
    id: z.string().regex(/^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$/, 'must be lowercase letters, digits and "-", 1-64 characters'),
    cron: z.string(),
    timezone: z.string().default('UTC'),
    userId: z.string().superRefine((id, ctx) => {
      const problem = userIdProblem(id);
      if (problem) ctx.addIssue({ code: 'custom', message: `${quoted(id)} ${problem}; a user ID is ${USER_ID_RULE}` });
    }),
    input: z.string().min(1, 'must not be empty: say what the run should do').max(100_000),
    model: z.string().min(1).default(DEFAULT_CHAT_MODEL),
    embeddingModel: z.string().min(1).default(DEFAULT_EMBEDDING_MODEL),
    catchupWindow: duration.default('10m'),
    jitter: duration.optional(),
    paused: z.boolean().default(false),
    simulate: simulateSchema.optional(),
    /** The reply's token cap, sent to the provider (max_completion_tokens): the output part of the budget guard's worst case. */
    maxOutputTokens: z.number().int().min(1).max(128_000).default(DEFAULT_MAX_OUTPUT_TOKENS),
    /**
     * The service tier the chat call asks for (priced at its rates, and refused before the call when the model's price
     * gives none); unset: the provider's default, priced as standard.
     */
    serviceTier: z.enum(SERVICE_TIERS).optional(),
    /**
     * The most one run may cost, USD as a decimal string: a run whose worst case (the budget guard's) is above it runs on
     * the cheap model (the downgrade map's) if that one's worst case is within it, else it is blocked, whatever the
     * monthly budget. Unset: no cap.
     */
    maxCostPerRun: positiveUsd.optional(),
    /**
     * When the user's monthly budget is exhausted: `block` (unset: each slot's run ends blocked) or `pause` (the first
     * blocked run pauses the task's schedule; the budget sweeper resumes it when the month turns over in the budget's
     * zone, or once the limit is raised).
     */
    onBudgetExhausted: z.enum(['block', 'pause']).optional(),
  })
  .strict();

export const tasksFileSchema = z
  .object({
    tasks: z.array(taskSchema),
    /** The monthly report schedule `tasks apply` keeps; false leaves it alone. */
    monthlyReport: z.union([z.literal(false), z.object({ timezone: z.string().default('UTC') }).strict()]).optional(),
    /** The `budget-sweep` schedule `tasks apply` keeps (expired reservations, undelivered budget events); false leaves it alone. */
    budgetSweep: z.literal(false).optional(),
    /** Monthly USD limits per user and a default (see src/budgets/budget-file.ts), applied with the tasks. */
    budgets: budgetsSectionSchema.optional(),
    /** Each default model's cheap model, used from 80 % of a user's budget. */
    downgrade: downgradeSectionSchema.optional(),
  })
  .strict();

/** One schedule per task: a file with more is a mistake (or a generator gone wrong) before it is a fleet. */
export const MAX_TASKS = 10_000;

export type Task = z.infer<typeof taskSchema>;
export type TasksFile = z.infer<typeof tasksFileSchema>;

/** Reads and validates a tasks file; every problem is a UserError naming the file, the task and the fix. */
export function loadTasksFile(path: string): TasksFile {
  const text = readInputFile(path, TASKS_FILE);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new UserError(`tasks file ${path} is not valid JSON: ${(err as Error).message}`);
  }
  return parseTasksFile(json, path);
}

export function parseTasksFile(json: unknown, source = 'tasks file'): TasksFile {
  const tasks = (json as { tasks?: unknown } | null)?.tasks;
  if (Array.isArray(tasks)) {
    checkEntryCap(source, 'tasks', tasks.length, MAX_TASKS, 'run a second deployment (its own Temporal namespace) for more');
  }
  const parsed = tasksFileSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `  - ${describePath(json, i.path)}: ${i.message}`).join('\n');
    throw new UserError(`${source} is invalid:\n${issues}\nSee examples/tasks.json for the format.`);
  }
  const seen = new Set<string>();
  for (const task of parsed.data.tasks) {
    if (seen.has(task.id)) throw new UserError(`${source}: task id "${task.id}" appears more than once; task ids must be unique`);
    seen.add(task.id);
    validateCron(task.cron, `task "${task.id}": cron`);
    validateTimeZone(task.timezone, `task "${task.id}": timezone`);
  }
  budgetChangesOf(parsed.data.budgets, source); // limits, zones and user IDs, checked before anything is applied
  if (parsed.data.monthlyReport) validateTimeZone(parsed.data.monthlyReport.timezone, `${source}: monthlyReport.timezone`);
  return parsed.data;
}

/** `tasks[2].cron` becomes `task "digest" (tasks[2]) cron`, so the user sees which task is wrong. */
function describePath(json: unknown, path: PropertyKey[]): string {
  const text = path
    .map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`))
    .join('')
    .replace(/^\./, '');
  if (path[0] === 'tasks' && typeof path[1] === 'number') {
    const id = (json as { tasks?: { id?: unknown }[] }).tasks?.[path[1]]?.id;
    if (typeof id === 'string') return `task "${id}" (${text})`;
  }
  return text || '(file)';
}
