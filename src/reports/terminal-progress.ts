import { createProgress, type OnProgress } from '../progress-bar';

/** A progress bar on stderr for slow reports: only on a terminal, and only once the work has taken a moment. */
export function terminalProgress(delayMs = 400): { update: OnProgress; finish: () => void } {
  const started = Date.now();
  let bar: ReturnType<typeof createProgress> | undefined;
  let phase = '';
  return {
    update: (p) => {
      if (!process.stderr.isTTY || Date.now() - started < delayMs) return;
      if (p.phase !== phase) {
        bar?.finish();
        bar = createProgress(p.phase);
        phase = p.phase;
      }
      bar?.update(p.done, p.total);
    },
    finish: () => bar?.finish(),
  };
}
