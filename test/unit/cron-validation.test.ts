import { describe, expect, it } from 'vitest';
import { validateCron } from '../../src/tasks/cron';

describe('cron validation before anything reaches Temporal', () => {
  it.each([
    ['* * * *', /has 4 fields, not 5/],
    ['* * * * * *', /has 6 fields, not 5/],
    ['60 * * * *', /minute value 60 is outside 0-59/],
    ['0 24 * * *', /hour value 24 is outside 0-23/],
    ['0 0 0 * *', /day-of-month value 0 is outside 1-31/],
    ['0 0 * 13 *', /month value 13 is outside 1-12/],
    ['0 0 * * 8', /day-of-week value 8 is outside 0-7/],
    ['5-1 * * * *', /minute range 5-1 runs backwards/],
    ['*/0 * * * *', /minute step \/0 must be 1-59/],
    ['@hourly * * * *', /minute field "@hourly" has "@hourly"/],
  ])('%s', (cron, message) => {
    expect(() => validateCron(cron)).toThrow(message);
  });

  it.each(['*/5 * * * *', '0 9 * * 1-5', '0,30 8-18/2 1,15 * 0', '0 0 * * 7', '10-50/20 8 31 12 *'])('accepts %s', (cron) => {
    expect(() => validateCron(cron)).not.toThrow();
  });
});
