import { UserError } from '../errors';

/** A calendar month, `YYYY-MM`. Which instants it covers depends on the report's time zone. */
export type Month = string;

const MONTH = /^(\d{4})-(0[1-9]|1[0-2])$/;

/** Checks `--month`: `2026-06` passes; `2026-6`, `2026-13`, `June` get a UserError saying how to write it. */
export function parseMonth(text: string | undefined, where = '--month'): Month {
  if (text === undefined || text.trim() === '') throw new UserError(`${where} is required: write the month as YYYY-MM, e.g. 2026-06`);
  const m = MONTH.exec(text.trim());
  if (!m || m[1] === '0000') {
    throw new UserError(`${where} ${JSON.stringify(text)} is not a month: write it as YYYY-MM, e.g. 2026-06`);
  }
  return `${m[1]}-${m[2]}`;
}

/** The month an instant falls in, in a zone. */
export function monthAt(instant: Date, zone: string): Month {
  const parts = new Intl.DateTimeFormat('en-US', { timeZone: zone, year: 'numeric', month: '2-digit' }).formatToParts(instant);
  const year = parts.find((p) => p.type === 'year')?.value ?? '';
  const month = parts.find((p) => p.type === 'month')?.value ?? '';
  return parseMonth(`${year.padStart(4, '0')}-${month}`, 'computed month');
}

export function shiftMonth(month: Month, delta: number): Month {
  const m = MONTH.exec(month);
  if (!m) throw new Error(`not a month: ${month}`);
  const index = Number(m[1]) * 12 + (Number(m[2]) - 1) + delta;
  const year = Math.floor(index / 12);
  return `${String(year).padStart(4, '0')}-${String((index % 12) + 1).padStart(2, '0')}`;
}

/**
 * The month a scheduled monthly report covers: the one before the month its nominal time falls in, in the schedule's
 * zone. `0 0 1 * *` in Europe/Berlin fires at 2026-06-30T22:00:00Z, which is July 1st in Berlin, so it reports June.
 */
export const previousMonthOf = (scheduledAt: Date, zone: string): Month => shiftMonth(monthAt(scheduledAt, zone), -1);

/** Days of a month as `YYYY-MM-DD`, for charts that show every day. */
export function daysOf(month: Month): string[] {
  const m = MONTH.exec(month);
  if (!m) throw new Error(`not a month: ${month}`);
  const year = Number(m[1]);
  const mon = Number(m[2]);
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
  const count = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][mon - 1];
  return Array.from({ length: count }, (_, i) => `${month}-${String(i + 1).padStart(2, '0')}`);
}
