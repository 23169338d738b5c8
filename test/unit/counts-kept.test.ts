import { describe, expect, it } from 'vitest';
import { countsKept } from '../../src/models/counts-kept';

/** A counter that records which texts it was asked to count. */
function recordingCounter() {
  const asked: string[] = [];
  const count = countsKept((text) => {
    asked.push(text);
    return text.length;
  });
  return { asked, count };
}

describe('countsKept', () => {
  it('counts a text once, however often it is asked, and gives the same count each time', () => {
    const { asked, count } = recordingCounter();
    for (let i = 0; i < 3; i++) {
      expect(count('Summarise my inbox.')).toBe(19);
      expect(count('Draft my stand-up notes.')).toBe(24);
    }
    expect(asked).toEqual(['Summarise my inbox.', 'Draft my stand-up notes.']);
  });

  it('counts a text longer than 10,000 characters every time', () => {
    const { asked, count } = recordingCounter();
    const long = 'x'.repeat(10_001);
    expect([count(long), count(long)]).toEqual([10_001, 10_001]);
    expect(asked).toHaveLength(2);
  });

  it('keeps 1,000 texts: the 1,001st drops the oldest, which is counted again when asked', () => {
    const { asked, count } = recordingCounter();
    for (let i = 0; i <= 1_000; i++) count(`prompt ${i}`);
    count('prompt 1');
    count('prompt 0');
    expect(asked.slice(1_001)).toEqual(['prompt 0']);
  });
});
