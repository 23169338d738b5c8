import { UserError } from '../errors';
import { quoted } from '../text-table';

/**
 * The one rule for a user ID, wherever it comes from: the tasks file, the budgets file, CLI flags and arguments, the
 * admin page's URLs. Two IDs that look alike must not be two users, or a look-alike escapes its user's budget. So an
 * ID is refused, never repaired: normalising "e" + U+0301 into "é" would book charges to an ID other than the one
 * written in the operator's own system, and silently merging two IDs is the wrong default for money. Refused:
 *   - control, format and separator characters (Unicode Cc, Cf, Zl, Zp: zero-width spaces, bidi overrides, escapes)
 *     and lone surrogates (Cs: PostgreSQL cannot store them, the driver would turn them into U+FFFD);
 *   - leading or trailing whitespace;
 *   - text not in Unicode NFC, the composed form keyboards type and `id.normalize('NFC')` gives.
 */
export const USER_ID_RULE =
  '1 to 200 characters in Unicode NFC, without control or format characters (such as zero-width spaces) and without leading or trailing spaces';
const MAX_LENGTH = 200;
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}]/u;

const codePoint = (c: string): string => `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;

/** What is wrong with id as a user ID, or undefined when it follows the rule. */
export function userIdProblem(id: string): string | undefined {
  if (id.length === 0) return 'is empty';
  if (id.length > MAX_LENGTH) return `has ${id.length} characters`;
  const invisible = INVISIBLE.exec(id);
  if (invisible) return `contains ${codePoint(invisible[0])} (a control or format character) at character ${invisible.index + 1}`;
  if (/^\s|\s$/u.test(id)) return 'has leading or trailing spaces';
  const composed = id.normalize('NFC');
  if (composed !== id) return `is not in Unicode NFC; write it composed: ${quoted(composed)}`;
  return undefined;
}

/** The ID, or a UserError naming where it came from, the value, what is wrong and the rule. */
export function parseUserId(id: string, where = '--user'): string {
  const problem = userIdProblem(id);
  if (problem) throw new UserError(`${where} ${quoted(id)} ${problem}; a user ID is ${USER_ID_RULE}`);
  return id;
}
