import { describe, expect, it } from 'vitest';
import { UserError } from '../../src/errors';
import { MockProvider } from '../../src/models/mock-provider';
import { ProviderRejectedError } from '../../src/models/provider';
import { selectProvider } from '../../src/models/select-provider';

// Which provider a worker calls for which model, decided without a request.
describe('selectProvider', () => {
  const keys = { OPENAI_API_KEY: 'sk-test', ANTHROPIC_API_KEY: 'sk-ant-test' };

  it('is the mock by default, and refuses a name that is no provider', () => {
    expect(selectProvider({})).toBeInstanceOf(MockProvider);
    expect(() => selectProvider({ MODEL_PROVIDER: 'openai,claude', ...keys })).toThrow(UserError);
    expect(() => selectProvider({ MODEL_PROVIDER: 'openai,claude', ...keys })).toThrow(/"openai,anthropic"/);
  });

  it("needs each enabled provider's key, naming it", () => {
    expect(() => selectProvider({ MODEL_PROVIDER: 'openai,anthropic', OPENAI_API_KEY: 'sk-test' })).toThrow(/ANTHROPIC_API_KEY/);
    expect(() => selectProvider({ MODEL_PROVIDER: 'anthropic', ANTHROPIC_API_KEY: 'sk-ant-test' })).not.toThrow();
  });

  it('refuses a model whose provider is not enabled, for good and before any request, naming the setting', async () => {
    const anthropicOnly = selectProvider({ MODEL_PROVIDER: 'anthropic', ...keys });
    const embed = anthropicOnly.embed({ model: 'openai/text-embedding-3-small', input: 'x', attempt: 1 });
    await expect(embed).rejects.toBeInstanceOf(ProviderRejectedError);
    await expect(embed).rejects.toThrow(/MODEL_PROVIDER=openai,anthropic/);
    const openaiOnly = selectProvider({ MODEL_PROVIDER: 'openai', ...keys });
    await expect(openaiOnly.chat({ model: 'anthropic/claude-sonnet-4-6', prompt: 'x', attempt: 1 })).rejects.toBeInstanceOf(
      ProviderRejectedError,
    );
  });

  it('asks for a prompt count only where a provider counts: never with OpenAI alone, nothing for an openai/ model', async () => {
    expect(selectProvider({ MODEL_PROVIDER: 'openai', ...keys }).countPromptTokens).toBeUndefined();
    const both = selectProvider({ MODEL_PROVIDER: 'openai,anthropic', ...keys });
    expect(await both.countPromptTokens?.({ model: 'openai/gpt-4o-mini', prompt: 'x' })).toBeUndefined();
  });
});
