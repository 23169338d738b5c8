/** Plain-text tables for terminals and text reports; the CLI and the report renderers share it. */

/**
 * Text fit for a terminal: control characters (C0, DEL, C1: ESC sequences could move the cursor, rewrite lines or set
 * the window title) and bidirectional overrides (which reorder what the eye reads) are shown as escapes such as \x1b.
 */
export function printable(text: string): string {
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  return text.replace(/[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, (c) => {
    const code = c.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}

const escape = (c: string): string => {
  const hex = c.codePointAt(0)!.toString(16);
  return hex.length > 4 ? `\\u{${hex}}` : `\\u${hex.padStart(4, '0')}`;
};

/**
 * A value the user gave, fit for an error message: quoted, at most 40 characters, and every character that would not
 * show (controls, format characters such as a zero-width space, combining marks, spaces other than U+0020) as a \u escape, so two values that
 * look alike read differently.
 */
export function quoted(value: string): string {
  const head = value.length > 40 ? value.slice(0, 40) : value;
  return JSON.stringify(head).replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{M}]|(?! )\p{Zs}/gu, escape) + (value.length > 40 ? '...' : '');
}

/** Left-aligned columns; columns listed in `right` are right-aligned (numbers, money). */
export function formatTable(headers: string[], rawRows: string[][], right: number[] = []): string {
  const rows = rawRows.map((r) => r.map((c) => printable(c ?? '')));
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (right.includes(i) ? c.padStart(widths[i]) : c.padEnd(widths[i])))
      .join('  ')
      .trimEnd();
  return [line(headers), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}
