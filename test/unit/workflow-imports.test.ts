import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';

/**
 * Workflow code runs in Temporal's deterministic sandbox. It may import values only from @temporalio/workflow and
 * from other workflow files; anything else (node:*, pg, the activities) may be imported as a type only.
 */
it('workflow files import values only from @temporalio/workflow and each other', () => {
  const dir = join(import.meta.dirname, '..', '..', 'src', 'workflows');
  const offenders: string[] = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.ts'))) {
    const source = readFileSync(join(dir, file), 'utf8');
    for (const m of source.matchAll(/^(import|export)\s+(type\s+)?[^'"]*from\s+'([^']+)'/gm)) {
      const [, , typeOnly, from] = m;
      const allowed = typeOnly || from === '@temporalio/workflow' || from.startsWith('./') || from === '../constants';
      if (!allowed) offenders.push(`${file}: ${m[0]}`);
    }
  }
  expect(offenders).toEqual([]);
});
