import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { UserError } from '../errors';
import { parseUsd, toExactString } from '../money';
import { parseTimeZone } from '../time-zone';

/**
 * The `budgets` and `downgrade` sections, shared by the tasks file and `cronledger budgets apply FILE`:
 *   "budgets": { "default": { "monthly": "10.00" }, "users": { "u1": { "monthly": "25.00", "timezone": "Europe/Berlin" } } },
 *   "downgrade": { "openai/gpt-4o-mini": "openai/gpt-4.1-nano" }
 * Limits are decimal strings (never JSON numbers), in USD per month of the budget's zone.
 */

/** User IDs a budget may name: letters and digits first, then also `._@:+-`, at most 200 characters. */
export const USER_ID = /^[A-Za-z0-9][A-Za-z0-9._@:+-]{0,199}$/;

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

/** Checks a user ID for a budget; the message names the value and the rule. */
export function parseBudgetUserId(text: string, where = 'user'): string {
  if (!USER_ID.test(text)) {
    throw new UserError(
      `${where} ${JSON.stringify(text)} is not a user ID: use letters and digits first, then also . _ @ : + - (1-200 characters)`,
    );
  }
  return text;
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
  const entries: [string | null, z.infer<typeof budgetEntrySchema>][] = [
    ...(section.default ? [[null, section.default] as [null, z.infer<typeof budgetEntrySchema>]] : []),
    ...Object.entries(section.users ?? {}),
  ];
  return entries.map(([userId, entry]) => {
    const where = `${source}: budgets.${userId === null ? 'default' : `users.${JSON.stringify(userId)}`}`;
    if (userId !== null) parseBudgetUserId(userId, `${where}: user ID`);
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
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new UserError(`cannot read budgets file ${path}: ${why}`);
  }
  const parsed = budgetsFileSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `  - ${i.path.join('.') || '(file)'}: ${i.message}`).join('\n');
    throw new UserError(`budgets file ${path} is invalid:\n${issues}\nSee examples/budgets.json for the format.`);
  }
  return parsed.data;
}
