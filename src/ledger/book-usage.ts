import type pg from 'pg';
import { UserError } from '../errors';
import { bookCall, type BookedCall, type UsageBooking } from './record-usage';
import { recordUsageException, type UsageException } from './usage-exceptions';

export type BookingOutcome = { booked: 'ledger'; entry: BookedCall } | { booked: 'exception'; exception: UsageException };

/**
 * Books billed usage, never nowhere: into the ledger, or, when the ledger refuses it (InvalidUsageError, or
 * NoPriceError because no price is in force by the time it came back), into usage_exceptions under the same key.
 * Idempotent on that key either way. Database errors and a LedgerConflictError propagate.
 */
export async function bookUsageOrKeepException(pool: pg.Pool, booking: UsageBooking): Promise<BookingOutcome> {
  try {
    return { booked: 'ledger', entry: await bookCall(pool, booking) };
  } catch (err) {
    if (!(err instanceof UserError)) throw err;
    return { booked: 'exception', exception: await recordUsageException(pool, booking, err.message) };
  }
}
