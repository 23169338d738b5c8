import type pg from 'pg';

/**
 * Records the task IDs a `tasks apply` just reconciled: exactly these, nothing else (a task gone from the file is
 * gone from here, as its schedule is). One transaction, so a reader sees one apply's set or the next one's.
 */
export async function recordAppliedTasks(db: pg.Pool, taskIds: string[]): Promise<void> {
  await db.query('select record_applied_tasks($1)', [taskIds]);
}

export async function appliedTaskIds(db: pg.Pool): Promise<string[]> {
  const { rows } = await db.query<{ task_id: string }>('select task_id from applied_tasks order by task_id');
  return rows.map((r) => r.task_id);
}
