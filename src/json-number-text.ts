/**
 * JSON whose numbers are money or rates, read without a float: every number keeps its decimal text, and decimal text
 * ("1.5e-07", "0.13080438", "-2") is moved by powers of ten by string work. The providers' price tables (LiteLLM) and
 * cost reports (OpenAI's Costs API) write money as JSON numbers; JSON.parse would round them to binary.
 */

/** A marker no JSON string can hold (it starts with a NUL, which JSON text must escape). */
const NUMBER = '\u0000number:';

/**
 * JSON.parse with every number kept as its text (a string starting with a marker; read it back with numberText), so no
 * value passes through a float. Strings are copied as they are; only number tokens outside strings are quoted.
 */
export function parseKeepingNumberText(text: string): unknown {
  let out = '';
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j + 1;
    } else if (c === '-' || (c >= '0' && c <= '9')) {
      const m = /^-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/.exec(text.slice(i, i + 64));
      const token = m ? m[0] : c;
      out += JSON.stringify(NUMBER + token);
      i += token.length;
    } else {
      out += c;
      i++;
    }
  }
  return JSON.parse(out);
}

/** The decimal text of a number parsed by parseKeepingNumberText, or null when the value is no number. */
export const numberText = (value: unknown): string | null =>
  typeof value === 'string' && value.startsWith(NUMBER) ? value.slice(NUMBER.length) : null;

/**
 * Decimal text ("1.5e-07", "-0.06", "123.45") times 10^places as a plain decimal string without exponent, leading or
 * trailing zeros ("0.00000015" for 1.5e-07 and 0 places; "1.2345" for "123.45" and -2), or null when it is no number.
 */
export function shiftDecimal(text: string, places: number): string | null {
  const m = /^(-)?(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (!m) return null;
  const digits = (m[2] + (m[3] ?? '')).replace(/^0+(?=\d)/, '');
  // value = digits × 10^(exponent − fraction length + places)
  const scale = Number(m[4] ?? '0') - (m[3] ?? '').length + places;
  let whole: string;
  let fraction: string;
  if (scale >= 0) {
    whole = digits + '0'.repeat(scale);
    fraction = '';
  } else {
    const padded = digits.padStart(-scale + 1, '0');
    whole = padded.slice(0, padded.length + scale);
    fraction = padded.slice(padded.length + scale);
  }
  whole = whole.replace(/^0+(?=\d)/, '');
  fraction = fraction.replace(/0+$/, '');
  const plain = fraction ? `${whole}.${fraction}` : whole;
  return m[1] && /[1-9]/.test(plain) ? `-${plain}` : plain;
}
