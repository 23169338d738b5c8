/**
 * An error the user caused and can fix: bad input, a missing price, an unreachable stack.
 * The CLI prints only its message (no stack trace) and exits non-zero.
 */
export class UserError extends Error {
  constructor(
    message: string,
    readonly exitCode = 2,
  ) {
    super(message);
    this.name = 'UserError';
  }
}
