import { describe, expect, it } from 'vitest';
import { unclaimedSlots } from '../../src/schedules/missed-slots';

describe('matching fire times to claims (the rule, on listed times)', () => {
  const t = (hms: string) => new Date(`2026-11-02T${hms}Z`);
  const check = (s: { times: string[]; claims: string[]; from: string; created?: string; jitterMs: number }) => {
    const r = unclaimedSlots({
      times: s.times.map(t),
      claims: s.claims.map(t),
      from: t(s.from),
      createdAt: t(s.created ?? '00:00:00'),
      jitterMs: s.jitterMs,
    });
    return { due: r.due, missed: r.missed.map((d) => d.toISOString().slice(11, 19)) };
  };

  it('without jitter, a slot is claimed by a claim of its very minute', () => {
    expect(check({ times: ['10:00:00', '10:01:00', '10:02:00'], claims: ['10:00:00', '10:02:00'], from: '10:00:00', jitterMs: 0 })).toEqual(
      {
        due: 3,
        missed: ['10:01:00'],
      },
    );
  });

  it('with jitter, by the claim of its nominal minute, which a neighbour never borrows', () => {
    const times = ['10:01:19', '10:02:02', '10:03:00', '10:04:11'];
    expect(check({ times, claims: ['10:01:00', '10:03:00'], from: '10:01:00', jitterMs: 20_000 })).toEqual({
      due: 4,
      missed: ['10:02:02', '10:04:11'],
    });
  });

  it('with jitter, a slot whose nominal minute is before the creation is not owed, though it fires after it', () => {
    // created 10:00:10; 10:00:15 is the 10:00 slot, jittered: the server never fires it
    const times = ['10:00:15', '10:01:05', '10:02:19'];
    expect(check({ times, claims: [], from: '10:00:10', created: '10:00:10', jitterMs: 20_000 })).toEqual({
      due: 2,
      missed: ['10:01:05', '10:02:19'],
    });
  });

  it('with jitter of a minute or more, a slot that may be either side of the creation is left unchecked', () => {
    // hourly with 10 minutes of jitter, created 10:03: 10:07:30 may be the 10:00 slot (never fired) or a later one
    const times = ['09:05:00', '10:07:30', '11:08:00'];
    expect(check({ times, claims: [], from: '10:03:00', created: '10:03:00', jitterMs: 600_000 })).toEqual({
      due: 1,
      missed: ['11:08:00'],
    });
  });
});
