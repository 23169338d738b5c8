import { randomUUID } from 'node:crypto';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { dataDir } from '../config';
import { sha256 } from '../hash';
import { renderHtml } from './render-html';
import { renderCsvAll, renderJson, renderMarkdown } from './render';
import type { ArtifactFile, GeneratedReport, ReportSummary, UsageReport } from './types';

/** `$CRONLEDGER_REPORTS_DIR`, else `reports/` in the data folder. */
export const reportsDir = (env: NodeJS.ProcessEnv = process.env): string =>
  resolve(env.CRONLEDGER_REPORTS_DIR || join(dataDir(), 'reports'));

export const monthDir = (root: string, month: string): string => join(root, month);

/** The four artifacts of a report, in a fixed order. */
export function renderArtifacts(report: UsageReport): { name: string; content: string }[] {
  return [
    { name: 'usage.json', content: renderJson(report) },
    { name: 'usage.csv', content: renderCsvAll(report) },
    { name: 'usage.md', content: renderMarkdown(report) },
    { name: 'usage.html', content: renderHtml(report) },
  ];
}

/**
 * Writes `<root>/<YYYY-MM>/usage.{json,csv,md,html}` (directories 0700, files 0600: usage by user is private).
 * A file whose bytes would not change is left alone; one that changes is replaced atomically (write a temporary file,
 * then rename), so a reader never sees half a report. The temporary name is random and opened exclusively: replicas
 * on a shared volume may all be PID 1, and two writers must never share one.
 */
export async function writeArtifacts(report: UsageReport, root: string): Promise<GeneratedReport> {
  const dir = monthDir(root, report.month);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const files: ArtifactFile[] = [];
  let reportSha256 = '';
  for (const { name, content } of renderArtifacts(report)) {
    const path = join(dir, name);
    const existing = await readFile(path, 'utf8').catch(() => undefined);
    if (existing !== content) {
      const tmp = join(dir, `.${name}.${randomUUID()}.tmp`);
      try {
        await writeFile(tmp, content, { encoding: 'utf8', flag: 'wx', mode: 0o600 });
        await rename(tmp, path);
      } catch (err) {
        await rm(tmp, { force: true });
        throw err;
      }
    }
    const hash = sha256(content);
    if (name === 'usage.json') reportSha256 = hash;
    files.push({ name, path, bytes: Buffer.byteLength(content, 'utf8'), sha256: hash });
  }
  return { month: report.month, timeZone: report.timeZone, dir, files, reportSha256, summary: summarize(report) };
}

export function summarize(report: UsageReport, top = 5): ReportSummary {
  const e = report.unitEconomics;
  return {
    month: report.month,
    timeZone: report.timeZone,
    complete: report.period.complete,
    totalUsd: report.totals.costUsd,
    spendUsd: e.spendUsd,
    calls: report.totals.calls,
    completedRuns: e.completedRuns,
    activeUsers: e.activeUsers,
    costPerCompletedRunUsd: e.costPerCompletedRunUsd,
    failedCalls: report.failedCalls,
    duplicateSkippedRuns: report.duplicateSkippedRuns,
    topUsers: report.byUser
      .filter((l) => l.line === 'usage')
      .slice(0, top)
      .map((l) => ({ userId: l.userId, costUsd: l.costUsd })),
  };
}
