/** How far a slow job has come, reported phase by phase (a report's rollups, a rebuild). */
export interface Progress {
  phase: string;
  done: number;
  total: number;
}
export type OnProgress = (p: Progress) => void;

/**
 * A one-line progress bar on stderr, drawn only when stderr is a terminal, so scripts and CI logs stay clean.
 */
export function createProgress(label: string, stream: NodeJS.WriteStream = process.stderr) {
  const enabled = Boolean(stream.isTTY);
  let last = '';
  return {
    update(done: number, total: number, note = ''): void {
      if (!enabled || total === 0) return;
      const width = 30;
      const filled = Math.round((done / total) * width);
      const line = `${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total} ${note}`;
      if (line !== last) stream.write(`\r${line.padEnd(last.length)}`);
      last = line;
    },
    finish(): void {
      if (enabled && last) stream.write('\n');
    },
  };
}
