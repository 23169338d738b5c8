import type pg from 'pg';

export interface MemoryRow {
  run_workflow_id: string;
  temporal_run_id: string | null;
  task_id: string;
  user_id: string;
  content: string;
  embedding: number[];
  input_truncated_from: string | null;
  created_at: Date;
}

/**
 * Stores what a run remembers: its reply and the reply's embedding, once per execution (a retried store does
 * nothing). `inputTruncatedFrom` says the embedding covers only the reply's first tokens, up to the model's limit.
 */
export async function storeMemory(
  db: pg.Pool,
  m: {
    workflowId: string;
    temporalRunId: string | null;
    taskId: string;
    userId: string;
    content: string;
    embedding: number[];
    inputTruncatedFrom?: number | null;
  },
): Promise<void> {
  await db.query(
    `insert into memories (run_workflow_id, temporal_run_id, task_id, user_id, content, embedding, input_truncated_from)
     values ($1, $2, $3, $4, $5, $6, $7)
     on conflict do nothing`,
    [m.workflowId, m.temporalRunId, m.taskId, m.userId, m.content, JSON.stringify(m.embedding), m.inputTruncatedFrom ?? null],
  );
}
