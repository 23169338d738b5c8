import { UserError } from './errors';

/** Time zones, checked once for the tasks file, the report flags and the schedules alike. */

/** Throws a UserError naming the zone unless it is an IANA time zone this runtime knows. */
export function validateTimeZone(zone: string, where = 'timezone'): void {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: zone });
  } catch {
    throw new UserError(`${where} ${JSON.stringify(zone)} is not a known IANA time zone; use a name like "UTC" or "Europe/Berlin"`);
  }
}

/**
 * Checks `--tz` and returns the zone's canonical IANA spelling (`utc` becomes `UTC`), which keys the rollups.
 * PostgreSQL must know the zone too; the rollup code checks that separately.
 */
export function parseTimeZone(text: string | undefined, where = '--tz'): string {
  const zone = (text ?? 'UTC').trim();
  validateTimeZone(zone, where);
  return new Intl.DateTimeFormat('en-US', { timeZone: zone }).resolvedOptions().timeZone;
}
