/** Small output helpers shared by the commands: aligned tables and stable JSON. */

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? v.toString() : v), 2)}\n`);
}

/** Left-aligned columns; columns listed in `right` are right-aligned (numbers, money). */
export function formatTable(headers: string[], rows: string[][], right: number[] = []): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (right.includes(i) ? c.padStart(widths[i]) : c.padEnd(widths[i])))
      .join('  ')
      .trimEnd();
  return [line(headers), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

export function printTable(headers: string[], rows: string[][], right: number[] = []): void {
  process.stdout.write(`${formatTable(headers, rows, right)}\n`);
}
