import { UserError } from '../errors';

/** A backfill longer than this is refused: a typo in a year should not start a year of model calls. */
export const MAX_BACKFILL_DAYS = 31;

/** `--from` and `--to` of `backfill` and `runs retry`: ISO 8601 times with a zone, in order, at most MAX_BACKFILL_DAYS apart. */
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
