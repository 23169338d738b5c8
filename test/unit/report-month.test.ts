import { describe, expect, it } from 'vitest';
import { previousMonthOf } from '../../src/reports/month';

describe('the month a scheduled report covers', () => {
  it('is the month before the nominal time, in the schedule zone', () => {
    // `0 0 1 * *` in Berlin fires at 22:00 UTC on the last day of the month it follows.
    expect(previousMonthOf(new Date('2026-06-30T22:00:00Z'), 'Europe/Berlin')).toBe('2026-06');
    expect(previousMonthOf(new Date('2026-06-30T22:00:00Z'), 'UTC')).toBe('2026-05');
    expect(previousMonthOf(new Date('2027-01-01T00:00:00Z'), 'UTC')).toBe('2026-12');
    expect(previousMonthOf(new Date('2026-03-01T05:00:00Z'), 'America/New_York')).toBe('2026-02');
  });
});
