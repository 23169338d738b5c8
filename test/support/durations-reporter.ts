import type { Reporter, SerializedError, TestModule } from 'vitest/node';

/**
 * After the default reporter: every file of the run by its wall time (import, hooks and tests), longest first, with
 * its project and when it started (seconds after the run's first file), then the run's wall time (from its start,
 * global setup included, to its last file's end; the servers' teardown follows). Where a run's time goes, in one
 * place of the CI log. Last, each unhandled error in a few lines (its message, the file it came up in, its top frames),
 * so the tail of a log that fails with every test passed still names the error.
 */
export default class DurationsReporter implements Reporter {
  private readonly started = new Map<string, number>();
  private readonly rows: { file: string; project: string; start: number; wall: number; state: string }[] = [];
  private runStart = Date.now();

  onTestRunStart(): void {
    this.runStart = Date.now();
  }

  onTestModuleQueued(module: TestModule): void {
    this.started.set(`${module.project.name}:${module.moduleId}`, Date.now());
  }

  onTestModuleEnd(module: TestModule): void {
    const start = this.started.get(`${module.project.name}:${module.moduleId}`) ?? Date.now();
    this.rows.push({ file: module.moduleId, project: module.project.name, start, wall: Date.now() - start, state: module.state() });
  }

  onTestRunEnd(_modules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<SerializedError>): void {
    this.printDurations();
    if (unhandledErrors.length > 0) process.stdout.write(`\n${unhandledErrors.map(describeError).join('\n')}\n`);
  }

  private printDurations(): void {
    if (this.rows.length < 2) return;
    const first = Math.min(...this.rows.map((r) => r.start));
    const s = (ms: number) => (ms / 1000).toFixed(1).padStart(6);
    const root = process.cwd() + '/';
    const lines = [...this.rows]
      .sort((a, b) => b.wall - a.wall)
      .map(
        (r) =>
          `${s(r.wall)} s  from ${s(r.start - first)} s  ${r.project.padEnd(15)} ${r.file.replace(root, '')}` +
          (r.state === 'passed' ? '' : ` (${r.state})`),
      );
    const total = `vitest wall time: ${((Date.now() - this.runStart) / 1000).toFixed(1)} s (${this.rows.length} files)`;
    process.stdout.write(`\nfiles by wall time (${this.rows.length}):\n${lines.join('\n')}\n${total}\n`);
    this.rows.length = 0;
  }
}

/** An unhandled error in a few lines: name and message, where it came up (file and test), the first stack frames. */
function describeError(e: SerializedError, index: number): string {
  const root = process.cwd() + '/';
  const where = [e.VITEST_TEST_PATH, e.VITEST_TEST_NAME].filter((w) => typeof w === 'string').map((w) => w.replace(root, ''));
  const frames = (e.stack ?? '')
    .split('\n')
    .filter((l) => l.trimStart().startsWith('at '))
    .slice(0, 4);
  const cause = e.cause ? [`  caused by: ${e.cause.name ?? 'Error'}: ${e.cause.message}`] : [];
  return [
    `unhandled error ${index + 1}: ${e.name ?? 'Error'}: ${e.message}`,
    `  while running: ${where.length > 0 ? where.join(' > ') : 'no test file'}`,
    ...frames.map((f) => `  ${f.trim()}`),
    ...cause,
  ].join('\n');
}
