import { UserError } from '../errors';
import { createAnthropicProvider } from './anthropic-provider';
import { MockProvider } from './mock-provider';
import { createOpenAIProvider } from './openai-provider';
import { ProviderRejectedError, type ModelProvider, type PromptCountRequest } from './provider';

const REAL_PROVIDERS = ['openai', 'anthropic'] as const;
type RealProvider = (typeof REAL_PROVIDERS)[number];

/**
 * MODEL_PROVIDER=mock (default, offline: the mock answers every model), or the real providers to call, comma-separated:
 * `openai` (any OpenAI-compatible endpoint via OPENAI_BASE_URL / OPENAI_API_KEY), `anthropic` (ANTHROPIC_BASE_URL /
 * ANTHROPIC_API_KEY), or `openai,anthropic`. Each call goes to the provider its model's prefix names: `anthropic/...`
 * to Anthropic, any other model to the OpenAI-compatible endpoint.
 */
export function selectProvider(env: NodeJS.ProcessEnv = process.env): ModelProvider {
  const name = env.MODEL_PROVIDER ?? 'mock';
  if (name === 'mock') return new MockProvider();
  const names = name.split(',').map((n) => n.trim());
  const unknown = names.filter((n) => !(REAL_PROVIDERS as readonly string[]).includes(n));
  if (unknown.length > 0 || names.length === 0) {
    throw new UserError(
      `MODEL_PROVIDER=${JSON.stringify(name)} is not a provider; use "mock" (offline), "openai", "anthropic" or "openai,anthropic"`,
    );
  }
  const providers = new Map<RealProvider, ModelProvider>();
  if (names.includes('openai')) providers.set('openai', createOpenAIProvider(env));
  if (names.includes('anthropic')) providers.set('anthropic', createAnthropicProvider(env));
  return routeByModel(providers, name);
}

/** One provider for a worker's calls, each sent to the provider its model's prefix names. */
export function routeByModel(providers: ReadonlyMap<RealProvider, ModelProvider>, configured: string): ModelProvider {
  const wantedOf = (model: string): RealProvider => (model.startsWith('anthropic/') ? 'anthropic' : 'openai');
  const providerOf = (model: string): ModelProvider => {
    const wanted = wantedOf(model);
    const provider = providers.get(wanted);
    if (!provider) {
      throw new ProviderRejectedError(
        `${model} is called through ${wanted}, which MODEL_PROVIDER=${configured} does not enable; add it (MODEL_PROVIDER=openai,anthropic)`,
        null,
      );
    }
    return provider;
  };
  return {
    name: [...providers.keys()].join(','),
    chat: async (req) => providerOf(req.model).chat(req),
    embed: async (req) => providerOf(req.model).embed(req),
    // Only when a provider counts (so the budget guard asks nothing otherwise). A model no enabled provider serves
    // has no count; its call is refused with the reason.
    ...([...providers.values()].some((p) => p.countPromptTokens)
      ? { countPromptTokens: async (req: PromptCountRequest) => providers.get(wantedOf(req.model))?.countPromptTokens?.(req) }
      : {}),
  };
}
