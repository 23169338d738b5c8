import type pg from 'pg';
import { inTransaction } from './pool';

/**
 * Records the task IDs a `tasks apply` just reconciled: exactly these, nothing else (a task gone from the file is
 * gone from here, as its schedule is). One transaction, so a reader sees one apply's set or the next one's.
 */
export async function recordAppliedTasks(db: pg.Pool, taskIds: string[]): Promise<void> {
  await inTransaction(db, async (tx) => {
    await tx.query('delete from applied_tasks where not (task_id = any($1::text[]))', [taskIds]);
    await tx.query(
      `insert into applied_tasks (task_id) select unnest($1::text[])
       on conflict (task_id) do update set applied_at = now()`,
      [taskIds],
    );
  });
}

export async function appliedTaskIds(db: pg.Pool): Promise<string[]> {
  const { rows } = await db.query<{ task_id: string }>('select task_id from applied_tasks order by task_id');
  return rows.map((r) => r.task_id);
}
