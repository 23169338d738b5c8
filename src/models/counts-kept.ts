/**
 * A token counter that keeps its count per text: every run of a task sends the same prompt (and the mock answers it with
 * the same reply), and counting it again each run was the tokenizer's share of a worker's CPU in P1
 * (docs/decisions/worker-cpu-per-run.md). Each counter keeps up to COUNTS_KEPT texts of at most KEPT_TEXT_CHARS
 * characters, the oldest dropped first; a longer text is counted each time.
 */
const COUNTS_KEPT = 1_000;
const KEPT_TEXT_CHARS = 10_000;

export function countsKept(count: (text: string) => number): (text: string) => number {
  const kept = new Map<string, number>();
  return (text) => {
    const known = kept.get(text);
    if (known !== undefined) return known;
    const counted = count(text);
    if (text.length <= KEPT_TEXT_CHARS) {
      if (kept.size >= COUNTS_KEPT) kept.delete(kept.keys().next().value as string);
      kept.set(text, counted);
    }
    return counted;
  };
}
