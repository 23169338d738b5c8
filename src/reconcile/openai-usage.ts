import { UserError } from '../errors';
import {
  bucketsOf,
  dayOfUnixSeconds,
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
 * OpenAI's organization Usage API (completions and embeddings, daily buckets grouped by model, project, API key, batch
 * and service tier) and Costs API (daily buckets grouped by line item and project), read with an admin key.
 * Completions' input_tokens include the cached ones: the uncached part is the `input` class. A cost line item reads
 * "<model>, <class>" ("gpt-4o-mini-2024-07-18, cached input", optionally ", batch"/", flex"/", priority"); a line
 * that does not is kept whole as a `line_item` key. Costs carry no tier otherwise: they count as the standard tier.
 */
export const OPENAI_DEFAULT_BASE_URL = 'https://api.openai.com/v1';

export function openaiRequests(baseUrl: string, from: string, to: string): ReportRequest[] {
  const start = String(Date.parse(`${from}T00:00:00Z`) / 1000);
  const end = String(Date.parse(`${to}T00:00:00Z`) / 1000 + 86_400);
  const usage = (path: string): ReportRequest => ({
    url: `${baseUrl.replace(/\/$/, '')}${path}`,
    query: [
      ['start_time', start],
      ['end_time', end],
      ['bucket_width', '1d'],
      ...['model', 'project_id', 'api_key_id', 'batch', 'service_tier'].map((g): [string, string] => ['group_by', g]),
      ['limit', '31'],
    ],
  });
  return [
    usage('/organization/usage/completions'),
    usage('/organization/usage/embeddings'),
    {
      url: `${baseUrl.replace(/\/$/, '')}/organization/costs`,
      query: [
        ['start_time', start],
        ['end_time', end],
        ['bucket_width', '1d'],
        ['group_by', 'line_item'],
        ['group_by', 'project_id'],
        ['limit', '180'],
      ],
    },
  ];
}

const LINE_CLASSES: Record<string, TokenClass> = { input: 'input', 'cached input': 'cached_input', output: 'output' };

/** The rows of one page (which report it is of, each result says: its `object`); costs of embedding models are `embedding`. */
export function openaiPageRows(page: unknown, where: string, embeddingModels: Set<string>): ProviderRow[] {
  const rows: ProviderRow[] = [];
  for (const bucket of bucketsOf(page, where)) {
    const day = dayOfUnixSeconds(bucket.start_time, where);
    for (const r of resultsOf(bucket, where)) {
      const projectId = stringOrNull(r.project_id, 'project_id', where);
      const apiKeyId = stringOrNull(r.api_key_id, 'api_key_id', where);
      const usage = (model: string, tokenClass: TokenClass, tokens: string, serviceTier: string): void => {
        if (tokens !== '0') rows.push({ day, model, tokenClass, serviceTier, projectId, apiKeyId, tokens, costUsd: null });
      };
      if (r.object === 'organization.usage.completions.result' || r.object === 'organization.usage.embeddings.result') {
        const model = stringOrNull(r.model, 'model', where);
        if (model === null) throw new UserError(`${where}: a usage result has no model; read the report with group_by=model`);
        const tier = r.batch === true ? 'batch' : priceTierOf(r.service_tier);
        const input = BigInt(tokenCount(r.input_tokens, 'input_tokens', where));
        if (r.object === 'organization.usage.embeddings.result') {
          embeddingModels.add(model);
          usage(model, 'embedding', String(input), tier);
          continue;
        }
        const cached = BigInt(tokenCount(r.input_cached_tokens, 'input_cached_tokens', where));
        if (cached > input) throw new UserError(`${where}: input_cached_tokens ${cached} exceed input_tokens ${input}`);
        usage(model, 'input', String(input - cached), tier);
        usage(model, 'cached_input', String(cached), tier);
        usage(model, 'output', tokenCount(r.output_tokens, 'output_tokens', where), tier);
      } else if (r.object === 'organization.costs.result') {
        const amount = r.amount as { value?: unknown; currency?: unknown } | undefined;
        if (typeof amount?.currency !== 'string' || amount.currency.toLowerCase() !== 'usd') {
          throw new UserError(`${where}: a cost is in ${JSON.stringify(amount?.currency)}, not USD; cronledger's ledger is in USD`);
        }
        const costUsd = decimalOf(amount.value, 0, 'amount.value', where);
        const lineItem = stringOrNull(r.line_item, 'line_item', where) ?? '(no line item)';
        const m = /^(.+), (input|cached input|output)(?:, (batch|flex|priority))?$/i.exec(lineItem);
        const model = m ? m[1] : lineItem;
        const lineClass = m ? LINE_CLASSES[m[2].toLowerCase()] : 'line_item';
        rows.push({
          day,
          model,
          tokenClass: lineClass,
          serviceTier: m?.[3]?.toLowerCase() ?? 'standard',
          projectId,
          apiKeyId,
          tokens: null,
          costUsd,
        });
      } else {
        throw new UserError(`${where}: a result of kind ${JSON.stringify(r.object)} is no OpenAI usage or cost result`);
      }
    }
  }
  return rows;
}

/** Cost lines of embedding models bill their input: the `embedding` class, as their usage. */
export const withEmbeddingCosts = (rows: ProviderRow[], embeddingModels: Set<string>): ProviderRow[] =>
  rows.map((r) => (r.costUsd !== null && r.tokenClass === 'input' && embeddingModels.has(r.model) ? { ...r, tokenClass: 'embedding' } : r));
