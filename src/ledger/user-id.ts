import { UserError } from '../errors';

/**
 * A user ID as cronledger stores it: 1 to 200 characters, none of them a control character or a bidirectional
 * override (they would reach terminals, reports and spreadsheets, and two IDs that look alike must not be two users).
 */
export const USER_ID_RULE = '1 to 200 characters, without control characters';
const MAX_LENGTH = 200;

export function userIdProblem(id: string): string | undefined {
  if (id.trim().length === 0) return 'is empty';
  if (id.length > MAX_LENGTH) return `has ${id.length} characters`;
  // eslint-disable-next-line no-control-regex -- finding control characters is the point
  if (/[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/.test(id)) return 'contains control characters';
  return undefined;
}

/** The ID, or a UserError naming the flag and (at most the first 40 characters of) the value, and the rule. */
export function parseUserId(id: string, flag = '--user'): string {
  const problem = userIdProblem(id);
  if (problem) {
    const shown = JSON.stringify(id.length > 40 ? id.slice(0, 40) : id) + (id.length > 40 ? '...' : '');
    throw new UserError(`${flag} ${shown} ${problem}; a user ID is ${USER_ID_RULE}`);
  }
  return id;
}
