import { encodeChat } from 'gpt-tokenizer/model/gpt-4o-mini';
import { describe, expect, it } from 'vitest';
import { worstCaseOf } from '../../src/budgets/worst-case';
import { PLAIN_TEXT_TOKENS } from '../../src/models/plain-text-tokens';

const counted = (prompt: string): number => encodeChat([{ role: 'user', content: prompt }], 'gpt-4o-mini', PLAIN_TEXT_TOKENS).length;

describe('worstCaseOf', () => {
  it('counts each prompt as the chat format sends it, the same when asked again, whatever was asked in between', () => {
    const prompts = ['Summarise my inbox.', 'Summarise my inbox and my calendar for the week, in three lines.', 'x'.repeat(20_000)];
    for (const round of [1, 2, 3]) {
      for (const prompt of prompts) {
        const worst = worstCaseOf({ prompt, maxOutputTokens: 100 });
        expect(worst.chat.promptTokens, `round ${round}, a prompt of ${prompt.length} characters`).toBe(counted(prompt));
      }
    }
    expect(new Set(prompts.map(counted)).size).toBe(prompts.length);
  });

  it('takes the larger of the count and a simulate profile, and the reply cap for the embedding', () => {
    const worst = worstCaseOf({
      prompt: 'Summarise my inbox.',
      maxOutputTokens: 50,
      simulate: { promptTokens: 1_000, embeddingTokens: 70 },
    });
    expect(worst.chat).toEqual({
      promptTokens: 1_000,
      cachedPromptTokens: 0,
      cacheWrite5mTokens: 0,
      cacheWrite1hTokens: 0,
      completionTokens: 50,
      reasoningTokens: 0,
      serviceTier: null,
    });
    expect(worst.embedding.promptTokens).toBe(70);
  });
});
