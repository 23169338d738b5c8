import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { perMillionOf } from '../../src/ledger/litellm-import';
import { runCli } from '../support/cli';

// `cronledger prices import --litellm FILE --models ...` on a verbatim copy of LiteLLM's entries
// (test/fixtures/litellm-model-prices.md says where it came from).

const FIXTURE = 'test/fixtures/litellm-model-prices.json';
const dir = mkdtempSync(join(tmpdir(), 'cronledger-litellm-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const importTo = async (name: string, models: string) => {
  const out = join(dir, name);
  const args = [
    'prices',
    'import',
    '--litellm',
    FIXTURE,
    '--models',
    models,
    '--version',
    'l1',
    '--effective-from',
    '2026-12-01T00:00:00Z',
  ];
  const r = await runCli([...args, '--out', out]);
  return { ...r, out, file: existsSync(out) ? (JSON.parse(readFileSync(out, 'utf8')) as Record<string, unknown>) : null };
};

describe("perMillionOf: a per-token rate's decimal text, moved six places by string work", () => {
  it.each([
    ['1.5e-07', '0.15'],
    ['3e-06', '3'],
    ['3.75e-06', '3.75'],
    ['1.875e-06', '1.875'],
    ['2.5E-7', '0.25'],
    ['0.0', '0'],
    ['0.000002', '2'],
    ['15', '15000000'],
    ['1e-18', '0.000000000001'],
    ['1.125e-05', '11.25'],
  ])('%s per token is %s per million', (text, perMillion) => {
    expect(perMillionOf(text)).toBe(perMillion);
  });
  it.each(['5.0000000000000004e-08', '1e-19', '-1e-06', '1e+07', 'NaN'])(
    '%s is refused (not exact at 12 decimals, negative, too large)',
    (text) => {
      expect(perMillionOf(text)).toBeNull();
    },
  );
});

describe('prices import --litellm', () => {
  it('turns LiteLLM entries into one price version: every class, tier and long-context rate exact, as prices apply accepts it', async () => {
    const r = await importTo('ok.json', 'claude-sonnet-4-5,claude-haiku-4-5,gpt-4o-mini,text-embedding-3-small,gpt-5.4');
    expect(r.code, r.stderr).toBe(0);
    expect(r.file).toMatchObject({ currency: 'USD', unit: 'per_million_tokens' });
    const [version] = (r.file as { versions: { version: string; effectiveFrom: string; models: Record<string, unknown> }[] }).versions;
    expect(version.version).toBe('l1');
    expect(version.effectiveFrom).toBe('2026-12-01T00:00:00Z');
    expect(version.models).toEqual({
      'anthropic/claude-sonnet-4-5': {
        input: '3',
        cachedInput: '0.3',
        cacheWrite5m: '3.75',
        cacheWrite1h: '6',
        output: '15',
        tiers: { batch: { input: '1.5', cachedInput: '0.15', cacheWrite5m: '1.875', output: '7.5' } },
      },
      'anthropic/claude-haiku-4-5': {
        input: '1',
        cachedInput: '0.1',
        cacheWrite5m: '1.25',
        cacheWrite1h: '2',
        output: '5',
        tiers: { batch: { input: '0.5', cachedInput: '0.05', cacheWrite5m: '0.625', output: '2.5' } },
      },
      'openai/gpt-4o-mini': {
        input: '0.15',
        cachedInput: '0.075',
        output: '0.6',
        tiers: { batch: { input: '0.075', output: '0.3' }, priority: { input: '0.25', cachedInput: '0.125', output: '1' } },
      },
      'openai/text-embedding-3-small': { embeddingInput: '0.02', tiers: { batch: { embeddingInput: '0.01' } } },
      'openai/gpt-5.4': {
        input: '2.5',
        cachedInput: '0.25',
        output: '15',
        longContext: { aboveInputTokens: 272000, input: '5', cachedInput: '0.5', output: '22.5' },
        tiers: {
          batch: {
            input: '1.25',
            cachedInput: '0.13',
            output: '7.5',
            longContext: { input: '2.5', cachedInput: '0.25', output: '11.25' },
          },
          flex: {
            input: '1.25',
            cachedInput: '0.13',
            output: '7.5',
            longContext: { input: '2.5', cachedInput: '0.25', output: '11.25' },
          },
          priority: { input: '5', cachedInput: '0.5', output: '30' },
        },
      },
    });
    expect(r.stderr).toMatch(/left out \(not a token rate\): claude-sonnet-4-5: search_context_cost_per_query/);
  }, 60_000);

  it('refuses an unknown model name with a clear error, a non-zero exit, and writes nothing', async () => {
    const r = await importTo('unknown.json', 'claude-sonnet-4-5,claude-imaginary-9');
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/has no entry "claude-imaginary-9"/);
    expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace
    expect(r.file).toBeNull();
  }, 60_000);

  it('refuses, by name, an entry with a token rate cronledger does not price (audio tokens)', async () => {
    const r = await importTo('audio.json', 'gpt-4o-mini,gpt-audio-mini');
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/LiteLLM entry "gpt-audio-mini" has a token rate cronledger can't represent: \w*audio_token/);
    expect(r.file).toBeNull();
  }, 60_000);

  it('refuses, by name and text, a rate that is not exact at 12 decimals per million (a float would have made it 0.05)', async () => {
    const r = await importTo('float.json', 'novita/nvidia/nemotron-3-nano-30b-a3b');
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(
      /"novita\/nvidia\/nemotron-3-nano-30b-a3b" has a rate cronledger can't represent: input_cost_per_token = 5\.0000000000000004e-08/,
    );
    expect(r.file).toBeNull();
  }, 60_000);
});
