import { UserError } from '../errors';
import type { Provider, ProviderRow } from './provider-rows';

/**
 * Which of an organization's spend is cronledger's: its bill has other projects' too. The projects (OpenAI) or
 * workspaces (Anthropic) and the API keys named here are cronledger's; a row of any of them is matched against the
 * ledger, and every other row is kept as the import's out-of-scope rows. Anthropic's default workspace has no ID:
 * name it "default". `--whole-organization` takes every row.
 */
export interface Scope {
  all?: true;
  projects?: string[];
  apiKeys?: string[];
}

export const SCOPE_ENV: Record<Provider, { projects: string; apiKeys: string; what: string }> = {
  openai: { projects: 'CRONLEDGER_OPENAI_PROJECT_IDS', apiKeys: 'CRONLEDGER_OPENAI_API_KEY_IDS', what: 'project' },
  anthropic: { projects: 'CRONLEDGER_ANTHROPIC_WORKSPACE_IDS', apiKeys: 'CRONLEDGER_ANTHROPIC_API_KEY_IDS', what: 'workspace' },
};

const list = (text: string | undefined): string[] =>
  (text ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

export function scopeFromEnv(provider: Provider, env: NodeJS.ProcessEnv, wholeOrganization: boolean): Scope {
  if (wholeOrganization) return { all: true };
  const names = SCOPE_ENV[provider];
  const projects = list(env[names.projects]);
  const apiKeys = list(env[names.apiKeys]);
  if (projects.length === 0 && apiKeys.length === 0) {
    throw new UserError(
      `say which of the ${provider} organization's spend is cronledger's: set ${names.projects} (${names.what} IDs, comma-separated) ` +
        `or ${names.apiKeys} (API key IDs), or pass --whole-organization when the organization spends on nothing else`,
    );
  }
  return { ...(projects.length ? { projects } : {}), ...(apiKeys.length ? { apiKeys } : {}) };
}

export function inScope(scope: Scope, row: Pick<ProviderRow, 'projectId' | 'apiKeyId'>): boolean {
  if (scope.all) return true;
  if (scope.projects?.includes(row.projectId ?? 'default')) return true;
  return row.apiKeyId !== null && (scope.apiKeys?.includes(row.apiKeyId) ?? false);
}
