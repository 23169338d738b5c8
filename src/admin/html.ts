/**
 * HTML built by a tagged template that escapes every interpolated value: a value is text unless it is a Raw made by
 * this module (another html`` fragment). A user ID like `<script>` or `"onmouseover=` renders as those characters.
 */
export class Raw {
  constructor(readonly html: string) {}
  toString(): string {
    return this.html;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' };

export const escapeHtml = (text: string): string => text.replace(/[&<>"'`]/g, (c) => ESCAPES[c]);

type Value = string | number | bigint | boolean | null | undefined | Raw | Value[];

function render(value: Value): string {
  if (value instanceof Raw) return value.html;
  if (Array.isArray(value)) return value.map(render).join('');
  if (value === null || value === undefined || value === false) return '';
  return escapeHtml(String(value));
}

export function html(strings: TemplateStringsArray, ...values: Value[]): Raw {
  let out = strings[0];
  for (const [i, v] of values.entries()) out += render(v) + strings[i + 1];
  return new Raw(out);
}

/** JSON inside <script type="application/json">: `<` escaped so no value can close the element. */
export const jsonForScript = (value: unknown): Raw =>
  new Raw(JSON.stringify(value).replace(/</g, '\\u003c').replace(/>/g, '\\u003e').replace(/&/g, '\\u0026'));
