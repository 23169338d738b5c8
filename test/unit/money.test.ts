import { describe, expect, it } from 'vitest';
import { costAtPerMillion, displayUsd, parseUsd, sumMoney, toAttoUsd, toExactString } from '../../src/money';

describe('money', () => {
  it('prices tokens exactly at per-million rates', () => {
    expect(toExactString(costAtPerMillion(parseUsd('0.15'), 1234n))).toBe('0.000185100000000000');
    expect(toExactString(costAtPerMillion(parseUsd('0.075'), 1n))).toBe('0.000000075000000000');
    expect(toExactString(costAtPerMillion(parseUsd('0.02'), 10_000_000n))).toBe('0.200000000000000000');
  });

  it('rounds half-even to 6 decimals only for display', () => {
    expect(displayUsd(parseUsd('0.0000025'))).toBe('$0.000002'); // tie, 2 is even: down
    expect(displayUsd(parseUsd('0.0000035'))).toBe('$0.000004'); // tie, 3 is odd: up
    expect(displayUsd(parseUsd('0.00000251'))).toBe('$0.000003'); // not a tie
    expect(displayUsd(parseUsd('-1.5'))).toBe('-$1.500000');
    expect(displayUsd(parseUsd('0'))).toBe('$0.000000');
  });

  it('sums to the last of 18 digits', () => {
    const total = sumMoney(['0.000000000000000001', '0.1', '0.2'].map((v) => parseUsd(v)));
    expect(toExactString(total)).toBe('0.300000000000000001');
    expect(toAttoUsd(total)).toBe(300_000_000_000_000_001n);
  });

  it.each(['1e-7', '0,15', '', '.5', 'NaN', '0.0000000000000000001'])('refuses %j with a message naming it', (text) => {
    expect(() => parseUsd(text, '--amount')).toThrow(/--amount/);
  });
});
