import { UserError } from '../errors';

/** At most this many days per reconciliation (a year): the reports page by day, and the ledger is read per day. */
export const MAX_DAYS = 366;

/** A UTC day YYYY-MM-DD that exists, or a UserError naming the flag. */
export function parseDay(text: string, flag: string): string {
  const ms = /^\d{4}-\d{2}-\d{2}$/.test(text) ? Date.parse(`${text}T00:00:00Z`) : NaN;
  if (Number.isNaN(ms) || new Date(ms).toISOString().slice(0, 10) !== text) {
    throw new UserError(`${flag} ${JSON.stringify(text)} is not a day; write it as YYYY-MM-DD (UTC), e.g. 2026-12-01`);
  }
  return text;
}

export function parseDayRange(fromText: string, toText: string): { from: string; to: string } {
  const from = parseDay(fromText, '--from');
  const to = parseDay(toText, '--to');
  if (to < from) throw new UserError(`--to ${to} is before --from ${from}; give --to the same day or later`);
  const days = (Date.parse(to) - Date.parse(from)) / 86_400_000 + 1;
  if (days > MAX_DAYS) throw new UserError(`--from ${from} --to ${to} is ${days} days; reconcile at most ${MAX_DAYS} days at a time`);
  return { from, to };
}
