import { describe, expect, it } from 'vitest';
import { UserError } from '../../src/errors';
import { createOpenAIProvider } from '../../src/models/openai-provider';
import { retryAfterMs } from '../../src/models/sdk-client';

// What the OpenAI provider decides without a request: its configuration and the retry delay a reply asks for.
describe('createOpenAIProvider without a request', () => {
  it("reads Retry-After as seconds, as an HTTP date, and OpenAI's retry-after-ms", () => {
    const now = Date.parse('2026-11-02T09:00:00Z');
    expect(retryAfterMs(new Headers({ 'retry-after': '3' }), now)).toBe(3000);
    expect(retryAfterMs(new Headers({ 'retry-after': 'Mon, 02 Nov 2026 09:00:20 GMT' }), now)).toBe(20_000);
    expect(retryAfterMs(new Headers({ 'retry-after-ms': '1500', 'retry-after': '9' }), now)).toBe(1500);
    expect(retryAfterMs(new Headers({ 'retry-after': 'soon' }), now)).toBeNull();
    expect(retryAfterMs(new Headers(), now)).toBeNull();
  });

  it('needs OPENAI_API_KEY, with a clear UserError', () => {
    expect(() => createOpenAIProvider({ OPENAI_BASE_URL: 'http://127.0.0.1:1/v1' })).toThrow(UserError);
    expect(() => createOpenAIProvider({ OPENAI_BASE_URL: 'http://127.0.0.1:1/v1' })).toThrow(/OPENAI_API_KEY/);
  });
});
