import { Worker } from '@temporalio/worker';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { FIXTURE_NAMES, FIXTURES } from '../support/histories';
import { workflowBundle } from '../support/workers';

/**
 * Determinism without a server: every history committed under test/fixtures/histories replays against today's
 * workflow bundle. A change to a workflow's commands (a step added, removed or moved) fails here; such a change goes
 * behind `patched()` (docs/upgrading.md). The fixtures are runs of today's code, recorded by test/replay-fresh.test.ts:
 *
 *   RECORD_HISTORIES=1 npx vitest run test/replay-fresh.test.ts
 *
 * which also replays every fresh recording against the code that made it.
 */
const files = readdirSync(FIXTURES).filter((f) => f.endsWith('.json'));
const history = (file: string) => JSON.parse(readFileSync(join(FIXTURES, file), 'utf8'));

it('the committed histories are the current paths, and only they', () => {
  expect(files.sort()).toEqual(FIXTURE_NAMES.map((n) => `${n}.json`).sort());
  // one path: no patch markers
  for (const f of files) {
    const markers = (history(f).events as { markerRecordedEventAttributes?: { markerName?: string } }[]).flatMap(
      (e) => e.markerRecordedEventAttributes?.markerName ?? [],
    );
    expect([f, markers.filter((m) => m === 'core_patch')]).toEqual([f, []]);
  }
});

it("every committed history replays against today's workflow code", async () => {
  const histories = files.map((f) => ({ workflowId: f, history: history(f) }));
  const failures: string[] = [];
  for await (const result of Worker.runReplayHistories({ workflowBundle: await workflowBundle() }, histories)) {
    if (result.error) failures.push(`${result.workflowId}: ${result.error.message}`);
  }
  expect(failures).toEqual([]);
}, 120_000);
