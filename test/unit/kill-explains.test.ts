import { describe, expect, it } from 'vitest';
import { READ_AFTER_KILL_MS, killExplaining } from '../support/chaos-figures';
import type { BilledRequest } from '../support/fake-openai';
import type { KillEvent } from '../support/worker-processes';

/**
 * The rule R1 (worker kills) uses to tell an answer lost with its dying worker from lost money. Pure logic over the
 * fake provider's record and the kill log, so its edges are tested here rather than waited for in a 70 s chaos run.
 */
const WINDOW_MS = 5_000;
const T = 1_790_000_000_000;

const billed = (over: Partial<BilledRequest> = {}): BilledRequest => ({
  id: 'chatcmpl-fake-1',
  endpoint: 'chat',
  usage: { prompt_tokens: 21, completion_tokens: 9 },
  caller: 'worker-1.2',
  receivedAt: T,
  billedAt: T + 2_500,
  model: 'gpt-4o-mini-2024-07-18',
  projectId: 'proj_cronledger',
  apiKeyId: 'key_test',
  ...over,
});
const kill = (incarnation: string, at: number): KillEvent => ({ worker: incarnation.split('.')[0], incarnation, pid: 4242, at });

describe('which kill explains an unbooked answer', () => {
  it('the caller died while the model was thinking', () => {
    const k = kill('worker-1.2', T + 1_000);
    expect(killExplaining(billed(), [kill('worker-2.1', T + 1_000), k], WINDOW_MS)).toBe(k);
  });

  it('the caller died just before the fake read its request (written before the SIGKILL, read after it)', () => {
    const k = kill('worker-1.2', T - 7);
    expect(killExplaining(billed(), [k], WINDOW_MS)).toBe(k);
  });

  it('not a request read long after its sender died: no process sends after its death, so the callers are misnamed', () => {
    expect(killExplaining(billed(), [kill('worker-1.2', T - READ_AFTER_KILL_MS - 1)], WINDOW_MS)).toBeUndefined();
  });

  it('the caller died soon after its answer came back, before it could be booked', () => {
    const k = kill('worker-1.2', T + 2_500 + WINDOW_MS);
    expect(killExplaining(billed(), [k], WINDOW_MS)).toBe(k);
  });

  it('not when the caller lived on for longer than the window after the answer: that answer should have been booked', () => {
    expect(killExplaining(billed(), [kill('worker-1.2', T + 2_500 + WINDOW_MS + 1)], WINDOW_MS)).toBeUndefined();
  });

  it('not by the death of another process, nor of an earlier incarnation of the same worker', () => {
    expect(killExplaining(billed(), [kill('worker-2.1', T + 1_000), kill('worker-1.1', T - 60_000)], WINDOW_MS)).toBeUndefined();
  });

  it('not when nothing was killed', () => {
    expect(killExplaining(billed(), [], WINDOW_MS)).toBeUndefined();
  });
});
