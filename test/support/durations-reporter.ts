import type { Reporter, TestModule } from 'vitest/node';

/**
 * After the default reporter: every file of the run by its wall time (import, hooks and tests), longest first, with
 * its project and when it started (seconds after the run's first file), then the run's wall time (from its start,
 * global setup included, to its last file's end; the servers' teardown follows). Where a run's time goes, in one
 * place of the CI log.
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

  onTestRunEnd(): void {
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
