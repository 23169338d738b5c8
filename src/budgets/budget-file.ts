import { z } from 'zod';
import { UserError } from '../errors';
import { BUDGETS_FILE, checkEntryCap, readInputFile } from '../input-file';
import { parseUserId } from '../ledger/user-id';
import { parseUsd, toExactString } from '../money';
import { parseTimeZone } from '../time-zone';

/**
 * The `budgets` and `downgrade` sections, shared by the tasks file and `cronledger budgets apply FILE`:
 *   "budgets": { "default": { "monthly": "10.00" }, "users": { "u1": { "monthly": "25.00", "timezone": "Europe/Berlin" } } },
 *   "downgrade": { "openai/gpt-4o-mini": "openai/gpt-4.1-nano" }
 * Limits are decimal strings (never JSON numbers), in USD per month of the budget's zone.
 */

/** Users with a budget of their own in one section; the default budget covers everyone else. */
export const MAX_BUDGET_USERS = 100_000;

const budgetEntrySchema = z
  .object({
    monthly: z.unknown(),
    timezone: z.string().optional(),
    effectiveFrom: z.iso.datetime({ offset: true }).optional(),
  })
  .strict();

export const budgetsSectionSchema = z
  .object({
    default: budgetEntrySchema.optional(),
    users: z.record(z.string(), budgetEntrySchema).optional(),
  })
  .strict();

export const downgradeSectionSchema = z.record(z.string().min(1), z.string().min(1));

export type BudgetsSection = z.infer<typeof budgetsSectionSchema>;
export type DowngradeSection = z.infer<typeof downgradeSectionSchema>;

/** One budget version to apply: user null is the default budget. */
export interface BudgetChange {
  userId: string | null;
  /** Exact decimal string at the ledger scale. */
  monthlyLimitUsd: string;
  timeZone: string;
  effectiveFrom?: Date;
}

/** Checks a monthly limit: a non-negative decimal string such as "25.00". */
export function parseMonthlyLimit(value: unknown, where = '--monthly'): string {
  if (typeof value !== 'string') {
    throw new UserError(`${where} ${JSON.stringify(value) ?? 'is missing'}: write the limit as a decimal string in USD, e.g. "25.00"`);
  }
  const exact = toExactString(parseUsd(value, where));
  if (exact.startsWith('-')) throw new UserError(`${where} ${value} is negative: a monthly limit is 0 or more USD, e.g. "25.00"`);
  return exact;
}

/** The budget versions a section asks for, every value checked; nothing is written here. */
export function budgetChangesOf(section: BudgetsSection | undefined, source: string): BudgetChange[] {
  if (!section) return [];
  checkEntryCap(
    `${source}: budgets.users`,
    'users',
    Object.keys(section.users ?? {}).length,
    MAX_BUDGET_USERS,
    'give the users without a budget of their own the "default" budget instead',
  );
  const entries: [string | null, z.infer<typeof budgetEntrySchema>][] = [
    ...(section.default ? [[null, section.default] as [null, z.infer<typeof budgetEntrySchema>]] : []),
    ...Object.entries(section.users ?? {}),
  ];
  return entries.map(([userId, entry]) => {
    const where = `${source}: budgets.${userId === null ? 'default' : `users.${JSON.stringify(userId)}`}`;
    if (userId !== null) parseUserId(userId, `${where}: user ID`);
    return {
      userId,
      monthlyLimitUsd: parseMonthlyLimit(entry.monthly, `${where}.monthly`),
      timeZone: parseTimeZone(entry.timezone, `${where}.timezone`),
      ...(entry.effectiveFrom ? { effectiveFrom: new Date(entry.effectiveFrom) } : {}),
    };
  });
}

// A budgets file, or a whole tasks file: its `budgets` and `downgrade` sections are taken, its tasks left to `tasks apply`.
export const budgetsFileSchema = z
  .object({
    budgets: budgetsSectionSchema.optional(),
    downgrade: downgradeSectionSchema.optional(),
    tasks: z.unknown().optional(),
    monthlyReport: z.unknown().optional(),
    budgetSweep: z.unknown().optional(),
  })
  .strict();

/** Reads a budgets file (or a tasks file, for its budgets and downgrade sections); every problem is a UserError. */
export function loadBudgetsFile(path: string): z.infer<typeof budgetsFileSchema> {
  const text = readInputFile(path, BUDGETS_FILE);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new UserError(`budgets file ${path} is not valid JSON: ${(err as Error).message}`);
  }
  const parsed = budgetsFileSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `  - ${i.path.join('.') || '(file)'}: ${i.message}`).join('\n');
    throw new UserError(`budgets file ${path} is invalid:\n${issues}\nSee examples/budgets.json for the format.`);
  }
  return parsed.data;
}
