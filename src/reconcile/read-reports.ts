import { secretSetting } from '../config';
import { UserError } from '../errors';
import { ANTHROPIC_DEFAULT_BASE_URL, anthropicPageRows, anthropicRequests } from './anthropic-usage';
import type { ImportInput } from './book';
import { OPENAI_DEFAULT_BASE_URL, openaiPageRows, openaiRequests, withEmbeddingCosts } from './openai-usage';
import { fetchPages, pagesHash, readPageFile, type ReadPage } from './pages';
import type { Provider, ProviderRow } from './provider-rows';
import { inScope, scopeFromEnv } from './scope';

/**
 * Everything one `cronledger reconcile <provider>` imports, read and checked before the database is touched: the
 * pages (admin API or files), their rows within the day range, each marked in or out of cronledger's scope.
 */
export async function readProviderReports(opts: {
  provider: Provider;
  from: string;
  to: string;
  files: string[];
  wholeOrganization: boolean;
  env: NodeJS.ProcessEnv;
}): Promise<ImportInput & { pages: number; outsideRange: number }> {
  const { provider, from, to, env } = opts;
  const scope = scopeFromEnv(provider, env, opts.wholeOrganization);
  const pages: ReadPage[] = opts.files.length > 0 ? opts.files.flatMap(readPageFile) : await fetchReports(provider, from, to, env);
  let rows: ProviderRow[];
  if (provider === 'openai') {
    const embeddingModels = new Set<string>();
    rows = withEmbeddingCosts(
      pages.flatMap((p) => openaiPageRows(p.page, p.where, embeddingModels)),
      embeddingModels,
    );
  } else {
    rows = pages.flatMap((p) => anthropicPageRows(p.page, p.where));
  }
  const inRange = rows.filter((r) => r.day >= from && r.day <= to);
  return {
    provider,
    source: opts.files.length > 0 ? 'file' : 'api',
    from,
    to,
    pagesSha256: pagesHash(pages),
    scope,
    rows: inRange.map((r) => ({ ...r, inScope: inScope(scope, r) })),
    pages: pages.length,
    outsideRange: rows.length - inRange.length,
  };
}

const ADMIN_KEYS: Record<Provider, string> = { openai: 'OPENAI_ADMIN_KEY', anthropic: 'ANTHROPIC_ADMIN_KEY' };

async function fetchReports(provider: Provider, from: string, to: string, env: NodeJS.ProcessEnv): Promise<ReadPage[]> {
  const keyName = ADMIN_KEYS[provider];
  const key = secretSetting(keyName, env);
  if (!key) {
    throw new UserError(
      `${keyName} is not set: the ${provider} usage and cost reports need an organization admin key (set ${keyName} or ` +
        `${keyName}_FILE), or give saved report pages with --file`,
    );
  }
  const [requests, headers] =
    provider === 'openai'
      ? [openaiRequests(env.OPENAI_BASE_URL || OPENAI_DEFAULT_BASE_URL, from, to), { authorization: `Bearer ${key}` }]
      : [
          anthropicRequests(env.ANTHROPIC_BASE_URL || ANTHROPIC_DEFAULT_BASE_URL, from, to),
          { 'x-api-key': key, 'anthropic-version': '2023-06-01' },
        ];
  const pages: ReadPage[] = [];
  for (const request of requests) pages.push(...(await fetchPages(request, headers, keyName)));
  return pages;
}
