import type pg from 'pg';
import { parseUsd, type Money } from '../money';

/** What the runs tables say about a month (given as instants): the duplicates stopped (claimed runs: the run rollups). */

/**
 * Executions that found their slot taken and stopped, detected inside the month, and what they cost. They stop
 * before any model call, so their cost is expected to be $0; it is measured, not assumed: ledger rows booked under a
 * duplicate's workflow ID that belongs to no claimed run (a duplicate sharing the owner's ID is indistinguishable
 * from the owner in the ledger, and the owner's rows are the owner's cost).
 */
export async function duplicateRuns(db: pg.Pool, from: string, to: string): Promise<{ runs: bigint; cost: Money }> {
  const { rows } = await db.query<{ runs: string; cost: string }>(
    `with dups as (
       select d.workflow_id from run_duplicates d where d.detected_at >= $1 and d.detected_at < $2
     )
     select (select count(*) from dups) as runs,
            (select coalesce(sum(l.cost_usd), 0)::numeric(38, 18) from usage_ledger l
              where l.workflow_id in (select workflow_id from dups d where not exists (select 1 from runs r where r.workflow_id = d.workflow_id))
                and l.created_at >= $1 and l.created_at < $2) as cost`,
    [from, to],
  );
  return { runs: BigInt(rows[0].runs), cost: parseUsd(rows[0].cost) };
}
