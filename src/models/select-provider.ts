import { UserError } from '../errors';
import { MockProvider } from './mock-provider';
import { createOpenAIProvider } from './openai-provider';
import type { ModelProvider } from './provider';

/** MODEL_PROVIDER=mock (default, offline) or openai (any OpenAI-compatible endpoint via OPENAI_BASE_URL / OPENAI_API_KEY). */
export function selectProvider(env: NodeJS.ProcessEnv = process.env): ModelProvider {
  const name = env.MODEL_PROVIDER ?? 'mock';
  if (name === 'mock') return new MockProvider();
  if (name === 'openai') return createOpenAIProvider(env);
  throw new UserError(`MODEL_PROVIDER=${JSON.stringify(name)} is not a provider; use "mock" (offline) or "openai"`);
}
