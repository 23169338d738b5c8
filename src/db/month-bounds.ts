/**
 * SQL for the bounds of a calendar month named by a `YYYY-MM` query parameter, written once for every query that cuts
 * by month. `firstDay` and `lastDay` are dates; `from` and `to` are the instants (timestamptz) where the month starts
 * and ends in the zone parameter, so `created_at >= from and created_at < to` is the month in that zone.
 *
 *   const m = monthBoundsSql('$2', '$1');
 *   `... where day between ${m.firstDay} and ${m.lastDay}`
 */
export function monthBoundsSql(month: string, zone = 'UTC'): { firstDay: string; lastDay: string; from: string; to: string } {
  const firstDay = `to_date(${month} || '-01', 'YYYY-MM-DD')`;
  const nextFirstDay = `(${firstDay} + interval '1 month')::date`;
  return {
    firstDay,
    lastDay: `(${nextFirstDay} - 1)`,
    from: `(${firstDay}::timestamp at time zone ${zone})`,
    to: `(${nextFirstDay}::timestamp at time zone ${zone})`,
  };
}
