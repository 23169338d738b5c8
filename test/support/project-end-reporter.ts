import type { Reporter, TestModule, TestSpecification } from 'vitest/node';
import { stackReleases } from './stack-releases';

/**
 * Releases a project's test stack as soon as the project's last file has ended, so that a stack no project needs any
 * more stops then instead of idling until the end of the run: the Temporal server on PostgreSQL once the temporal-server
 * files are done, the dev server (shared by integration and fault) while the last unit files still run.
 */
export default class ProjectEndReporter implements Reporter {
  private readonly filesLeft = new Map<string, number>();

  onTestRunStart(specifications: ReadonlyArray<TestSpecification>): void {
    this.filesLeft.clear();
    for (const s of specifications) this.filesLeft.set(s.project.name, (this.filesLeft.get(s.project.name) ?? 0) + 1);
  }

  onTestModuleEnd(module: TestModule): void {
    const project = module.project.name;
    const left = (this.filesLeft.get(project) ?? 0) - 1;
    this.filesLeft.set(project, left);
    if (left !== 0) return;
    stackReleases()
      .get(project)?.()
      .catch((err: unknown) => process.stderr.write(`stopping the test stack of project ${project} failed: ${String(err)}\n`));
  }
}
