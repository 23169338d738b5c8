import { UserError } from '../errors';

/** A whole-number flag such as --limit, refused with a message naming the flag and the value. */
export function parseCount(flag: string, text: string, max = 1_000_000): number {
  if (!/^\d{1,9}$/.test(text) || Number(text) < 1 || Number(text) > max) {
    throw new UserError(`${flag} ${JSON.stringify(text)} must be a whole number from 1 to ${max}`);
  }
  return Number(text);
}
