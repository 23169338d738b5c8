import { UserError } from '../errors';
import { numberText } from '../json-number-text';
import {
  bucketsOf,
  dayOfTimestamp,
  decimalOf,
  priceTierOf,
  resultsOf,
  stringOrNull,
  tokenCount,
  type ProviderRow,
  type TokenClass,
} from './provider-rows';
import type { ReportRequest } from './pages';

/**
 * Anthropic's Admin API: the messages usage report (daily buckets grouped by model, service tier, workspace and API
 * key: uncached input, cache reads, cache writes by lifetime, output) and the cost report (daily, grouped by workspace
 * and description: amounts as decimal strings in cents, each naming its model, tier and token type). A cost that is no
 * token cost of a model (web search, code execution) is kept whole as a `line_item` key under its description.
 */
export const ANTHROPIC_DEFAULT_BASE_URL = 'https://api.anthropic.com';

export function anthropicRequests(baseUrl: string, from: string, to: string): ReportRequest[] {
  const base = baseUrl.replace(/\/$/, '');
  const range: [string, string][] = [
    ['starting_at', `${from}T00:00:00Z`],
    ['ending_at', new Date(Date.parse(`${to}T00:00:00Z`) + 86_400_000).toISOString().replace('.000Z', 'Z')],
    ['bucket_width', '1d'],
    ['limit', '31'],
  ];
  return [
    {
      url: `${base}/v1/organizations/usage_report/messages`,
      query: [...range, ...['model', 'service_tier', 'workspace_id', 'api_key_id'].map((g): [string, string] => ['group_by[]', g])],
    },
    { url: `${base}/v1/organizations/cost_report`, query: [...range, ['group_by[]', 'workspace_id'], ['group_by[]', 'description']] },
  ];
}

const COST_CLASSES: Record<string, TokenClass> = {
  uncached_input_tokens: 'input',
  cache_read_input_tokens: 'cached_input',
  'cache_creation.ephemeral_5m_input_tokens': 'cache_write_5m',
  'cache_creation.ephemeral_1h_input_tokens': 'cache_write_1h',
  output_tokens: 'output',
};

/** The rows of one page: a usage result has uncached_input_tokens, a cost result an amount. */
export function anthropicPageRows(page: unknown, where: string): ProviderRow[] {
  const rows: ProviderRow[] = [];
  for (const bucket of bucketsOf(page, where)) {
    const day = dayOfTimestamp(bucket.starting_at, where);
    for (const r of resultsOf(bucket, where)) {
      const projectId = stringOrNull(r.workspace_id, 'workspace_id', where);
      const apiKeyId = stringOrNull(r.api_key_id, 'api_key_id', where);
      const serviceTier = priceTierOf(r.service_tier);
      if ('uncached_input_tokens' in r) {
        const model = stringOrNull(r.model, 'model', where);
        if (model === null) throw new UserError(`${where}: a usage result has no model; read the report with group_by[]=model`);
        const creation = (r.cache_creation ?? {}) as Record<string, unknown>;
        const classes: [TokenClass, unknown, string][] = [
          ['input', r.uncached_input_tokens, 'uncached_input_tokens'],
          ['cached_input', r.cache_read_input_tokens, 'cache_read_input_tokens'],
          ['cache_write_5m', creation.ephemeral_5m_input_tokens, 'cache_creation.ephemeral_5m_input_tokens'],
          ['cache_write_1h', creation.ephemeral_1h_input_tokens, 'cache_creation.ephemeral_1h_input_tokens'],
          ['output', r.output_tokens, 'output_tokens'],
        ];
        for (const [tokenClass, value, field] of classes) {
          const tokens = tokenCount(value, field, where);
          if (tokens !== '0') rows.push({ day, model, tokenClass, serviceTier, projectId, apiKeyId, tokens, costUsd: null });
        }
      } else if ('amount' in r) {
        if (r.currency !== 'USD')
          throw new UserError(`${where}: a cost is in ${JSON.stringify(r.currency)}, not USD; cronledger's ledger is in USD`);
        if (typeof r.amount !== 'string' || numberText(r.amount) !== null)
          throw new UserError(`${where}: a cost's amount is not a decimal string (cents)`);
        const costUsd = decimalOf(r.amount, -2, 'amount', where);
        const model = stringOrNull(r.model, 'model', where);
        const tokenClass = r.cost_type === 'tokens' && model !== null ? COST_CLASSES[String(r.token_type)] : undefined;
        rows.push(
          tokenClass && model
            ? { day, model, tokenClass, serviceTier, projectId, apiKeyId, tokens: null, costUsd }
            : {
                day,
                model: stringOrNull(r.description, 'description', where) ?? String(r.cost_type ?? '(no description)'),
                tokenClass: 'line_item',
                serviceTier,
                projectId,
                apiKeyId,
                tokens: null,
                costUsd,
              },
        );
      } else {
        throw new UserError(`${where}: a result is neither a messages usage result (uncached_input_tokens) nor a cost (amount)`);
      }
    }
  }
  return rows;
}
