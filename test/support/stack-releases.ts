/**
 * Per vitest project, the release of its test stack (test/support/global-setup.ts registers it). The project-end
 * reporter (test/support/project-end-reporter.ts) calls it once the project's last file has ended, and vitest's global
 * teardown calls it again at the end of the run (a second call returns the first's promise). The two load this module
 * separately, so the map lives on globalThis.
 */
export function stackReleases(): Map<string, () => Promise<void>> {
  return ((globalThis as { cronledgerStackReleases?: Map<string, () => Promise<void>> }).cronledgerStackReleases ??= new Map());
}
