import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { renderArtifacts, writeArtifacts } from '../src/reports/artifacts';
import { buildReport } from '../src/reports/build-report';
import { createTestContext, type TestContext } from './support/context';

/** Report artifacts on a volume that several replicas share (in compose each one is PID 1) and that others may read. */

let ctx: TestContext;
const root = mkdtempSync(join(tmpdir(), 'cronledger-artifacts-'));

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
});

afterAll(async () => {
  await ctx?.close();
  rmSync(root, { recursive: true, force: true });
});

it('two writers of one month at once each replace whole files, through temp files of their own, private to this user', async () => {
  // Same month, different content (the zone is in every artifact): the writers race for the same four paths.
  const [utc, tokyo] = await Promise.all(['UTC', 'Asia/Tokyo'].map((timeZone) => buildReport(ctx.pool, { month: '2026-06', timeZone })));
  for (let round = 0; round < 5; round++) {
    await Promise.all([writeArtifacts(utc, root), writeArtifacts(tokyo, root), writeArtifacts(utc, root), writeArtifacts(tokyo, root)]);
  }
  const dir = join(root, '2026-06');
  expect(readdirSync(dir).sort()).toEqual(['usage.csv', 'usage.html', 'usage.json', 'usage.md']); // no temp file left behind
  const whole = [renderArtifacts(utc), renderArtifacts(tokyo)];
  for (const name of readdirSync(dir)) {
    const content = readFileSync(join(dir, name), 'utf8');
    expect(
      whole.some((set) => set.find((f) => f.name === name)?.content === content),
      `${name} is one writer's whole file`,
    ).toBe(true);
    expect(statSync(join(dir, name)).mode & 0o777).toBe(0o600);
  }
  expect(statSync(dir).mode & 0o777).toBe(0o700);
});
