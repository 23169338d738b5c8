import { describe, expect, it } from 'vitest';
import { UserError } from '../../src/errors';
import { parseKeepingNumberText, shiftDecimal } from '../../src/json-number-text';
import { anthropicPageRows } from '../../src/reconcile/anthropic-usage';
import { parseDayRange } from '../../src/reconcile/days';
import { openaiPageRows, withEmbeddingCosts } from '../../src/reconcile/openai-usage';
import { inScope, scopeFromEnv } from '../../src/reconcile/scope';

// The providers' report pages as rows, read from their text: money from its decimal text, never a float.

const DAY = 1_764_720_000; // 2025-12-03T00:00:00Z
const page = (results: string): unknown =>
  parseKeepingNumberText(
    `{"object":"page","data":[{"object":"bucket","start_time":${DAY},"end_time":${DAY + 86_400},"results":[${results}]}],"has_more":false,"next_page":null}`,
  );

describe('decimal text', () => {
  it.each([
    ['1.5e-07', 0, '0.00000015'],
    ['0.13080438', 0, '0.13080438'],
    ['-0.06', 0, '-0.06'],
    ['123.45', -2, '1.2345'],
    ['123.78912', -2, '1.2378912'],
    ['0', -2, '0'],
    ['3e-06', 6, '3'],
    ['1E+2', 0, '100'],
  ])('%s × 10^%i is %s', (text, places, expected) => {
    expect(shiftDecimal(text, places)).toBe(expected);
  });
});

describe('OpenAI pages', () => {
  it('splits completions into uncached input, cached input and output; batch is a tier', () => {
    const rows = openaiPageRows(
      page(
        '{"object":"organization.usage.completions.result","input_tokens":1000,"input_cached_tokens":800,"output_tokens":500,' +
          '"num_model_requests":5,"project_id":"proj_a","api_key_id":"key_a","model":"gpt-4o-mini-2024-07-18","batch":true,"service_tier":null}',
      ),
      'p1',
      new Set(),
    );
    expect(rows.map((r) => [r.day, r.tokenClass, r.tokens, r.serviceTier, r.projectId])).toEqual([
      ['2025-12-03', 'input', '200', 'batch', 'proj_a'],
      ['2025-12-03', 'cached_input', '800', 'batch', 'proj_a'],
      ['2025-12-03', 'output', '500', 'batch', 'proj_a'],
    ]);
  });

  it("reads a cost's JSON number from its text (0.1 + 0.2 stays exact) and places line items it can", () => {
    const models = new Set(['text-embedding-3-small']);
    const rows = withEmbeddingCosts(
      openaiPageRows(
        page(
          [
            '{"object":"organization.costs.result","amount":{"value":0.13080438,"currency":"usd"},"line_item":"gpt-4o-2024-08-06, Cached input","project_id":"proj_a"}',
            '{"object":"organization.costs.result","amount":{"value":1.2e-05,"currency":"usd"},"line_item":"text-embedding-3-small, input","project_id":"proj_a"}',
            '{"object":"organization.costs.result","amount":{"value":0.30000000000000004,"currency":"usd"},"line_item":"GPT-5.4","project_id":null}',
          ].join(','),
        ),
        'p1',
        models,
      ),
      models,
    );
    expect(rows.map((r) => [r.model, r.tokenClass, r.costUsd])).toEqual([
      ['gpt-4o-2024-08-06', 'cached_input', '0.13080438'],
      ['text-embedding-3-small', 'embedding', '0.000012'],
      ['GPT-5.4', 'line_item', '0.30000000000000004'],
    ]);
  });

  it('refuses a page that is none, naming where it came from', () => {
    expect(() => openaiPageRows(parseKeepingNumberText('{"name":"x"}'), '--file x.json', new Set())).toThrow(
      /--file x.json is not a page of a usage or cost report/,
    );
    expect(() =>
      openaiPageRows(page('{"object":"organization.costs.result","amount":{"value":1,"currency":"eur"}}'), 'p', new Set()),
    ).toThrow(/in "eur", not USD/);
  });
});

describe('Anthropic pages', () => {
  const anthropicPage = (results: string): unknown =>
    parseKeepingNumberText(
      `{"data":[{"starting_at":"2025-08-01T00:00:00Z","ending_at":"2025-08-02T00:00:00Z","results":[${results}]}],"has_more":false,"next_page":null}`,
    );

  it('reads usage by class and costs in cents as USD', () => {
    const rows = anthropicPageRows(
      anthropicPage(
        [
          '{"uncached_input_tokens":1500,"cache_creation":{"ephemeral_1h_input_tokens":1000,"ephemeral_5m_input_tokens":500},"cache_read_input_tokens":200,' +
            '"output_tokens":500,"server_tool_use":{"web_search_requests":0},"api_key_id":"apikey_a","workspace_id":null,"model":"claude-sonnet-4-5","service_tier":"standard"}',
          '{"currency":"USD","amount":"123.78912","workspace_id":"wrkspc_a","description":"x","cost_type":"tokens","context_window":"0-200k",' +
            '"model":"claude-sonnet-4-5","service_tier":"batch","token_type":"cache_creation.ephemeral_5m_input_tokens"}',
          '{"currency":"USD","amount":"5","workspace_id":"wrkspc_a","description":"Web search","cost_type":"web_search","model":null,"service_tier":null,"token_type":null}',
        ].join(','),
      ),
      'p',
    );
    expect(rows.map((r) => [r.day, r.model, r.tokenClass, r.serviceTier, r.tokens, r.costUsd])).toEqual([
      ['2025-08-01', 'claude-sonnet-4-5', 'input', 'standard', '1500', null],
      ['2025-08-01', 'claude-sonnet-4-5', 'cached_input', 'standard', '200', null],
      ['2025-08-01', 'claude-sonnet-4-5', 'cache_write_5m', 'standard', '500', null],
      ['2025-08-01', 'claude-sonnet-4-5', 'cache_write_1h', 'standard', '1000', null],
      ['2025-08-01', 'claude-sonnet-4-5', 'output', 'standard', '500', null],
      ['2025-08-01', 'claude-sonnet-4-5', 'cache_write_5m', 'batch', null, '1.2378912'],
      ['2025-08-01', 'Web search', 'line_item', 'standard', null, '0.05'],
    ]);
  });

  it('refuses an amount written as a JSON number (the report writes cents as decimal strings)', () => {
    expect(() => anthropicPageRows(anthropicPage('{"currency":"USD","amount":12.5}'), 'p')).toThrow(/not a decimal string/);
  });
});

describe('days and scope', () => {
  it('refuses a day that does not exist, a range backwards and one over a year', () => {
    expect(() => parseDayRange('2026-02-29', '2026-03-01')).toThrow(/--from "2026-02-29" is not a day/);
    expect(() => parseDayRange('2026-03-02', '2026-03-01')).toThrow(/--to 2026-03-01 is before --from 2026-03-02/);
    expect(() => parseDayRange('2024-01-01', '2026-01-01')).toThrow(/at most 366 days/);
    expect(parseDayRange('2026-03-01', '2026-03-01')).toEqual({ from: '2026-03-01', to: '2026-03-01' });
  });

  it("takes only the named projects' or keys' rows; Anthropic's default workspace is named \"default\"", () => {
    expect(() => scopeFromEnv('openai', {}, false)).toThrow(UserError);
    const scope = scopeFromEnv(
      'anthropic',
      { CRONLEDGER_ANTHROPIC_WORKSPACE_IDS: 'default, wrkspc_b', CRONLEDGER_ANTHROPIC_API_KEY_IDS: 'apikey_c' },
      false,
    );
    expect(inScope(scope, { projectId: null, apiKeyId: 'apikey_x' })).toBe(true);
    expect(inScope(scope, { projectId: 'wrkspc_b', apiKeyId: null })).toBe(true);
    expect(inScope(scope, { projectId: 'wrkspc_z', apiKeyId: 'apikey_c' })).toBe(true);
    expect(inScope(scope, { projectId: 'wrkspc_z', apiKeyId: 'apikey_x' })).toBe(false);
    expect(inScope(scopeFromEnv('openai', {}, true), { projectId: 'anything', apiKeyId: null })).toBe(true);
  });
});

it('refuses a cost the ledger could not hold exactly rather than round it', () => {
  expect(() =>
    openaiPageRows(
      parseKeepingNumberText(
        `{"data":[{"start_time":${DAY},"results":[{"object":"organization.costs.result","amount":{"value":1.0000000000000000001,"currency":"usd"},"line_item":"x"}]}]}`,
      ),
      'p',
      new Set(),
    ),
  ).toThrow(/cannot hold exactly/);
});
