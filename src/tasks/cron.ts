import { UserError } from '../errors';

/**
 * Validates a 5-field cron expression (minute hour day-of-month month day-of-week) before anything is sent to
 * Temporal, so a bad file changes nothing and the message names the field. Each field takes `*`, numbers,
 * lists (`1,15`), ranges (`1-5`) and steps (`*\/5`, `10-50/20`); day-of-week is 0-7 with 0 and 7 both Sunday.
 * Matching is left to Temporal, whose schedule spec is the single source of the slot times.
 */
const FIELDS = [
  { name: 'minute', min: 0, max: 59 },
  { name: 'hour', min: 0, max: 23 },
  { name: 'day-of-month', min: 1, max: 31 },
  { name: 'month', min: 1, max: 12 },
  { name: 'day-of-week', min: 0, max: 7 },
] as const;

export function validateCron(expression: string, where = 'cron'): void {
  const fields = expression.trim().split(/\s+/);
  const fail = (why: string): never => {
    throw new UserError(
      `${where} ${JSON.stringify(expression)} is not a valid cron expression: ${why}. ` +
        'Use 5 fields "minute hour day-of-month month day-of-week", e.g. "*/5 * * * *" or "0 9 * * 1-5".',
    );
  };
  if (fields.length !== 5) fail(`it has ${fields.length} field${fields.length === 1 ? '' : 's'}, not 5`);
  fields.forEach((field, i) => {
    const { name, min, max } = FIELDS[i];
    for (const part of field.split(',')) {
      const m = /^(\*|(\d+)(?:-(\d+))?)(?:\/(\d+))?$/.exec(part);
      if (!m) fail(`${name} field "${field}" has "${part}", which is not *, a number, a range a-b or a step /n`);
      const [, , lo, hi, step] = m!;
      for (const v of [lo, hi]) {
        if (v !== undefined && (Number(v) < min || Number(v) > max)) {
          fail(`${name} value ${v} is outside ${min}-${max}`);
        }
      }
      if (lo !== undefined && hi !== undefined && Number(lo) > Number(hi)) fail(`${name} range ${lo}-${hi} runs backwards`);
      if (step !== undefined && (Number(step) < 1 || Number(step) > max)) fail(`${name} step /${step} must be 1-${max}`);
    }
  });
}
