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

/** One run's memory: its reply and the reply's embedding. */
export interface MemoryInput {
  workflowId: string;
  temporalRunId: string | null;
  taskId: string;
  userId: string;
  content: string;
  embedding: number[];
  inputTruncatedFrom?: number | null;
}

/**
 * The insert of one memory (a run's reply and its embedding), once per execution, its parameters numbered from $first
 * (storeRunMemoryAndComplete embeds it in the run's completion). `inputTruncatedFrom` says the embedding covers only
 * the reply's first tokens, up to the model's limit.
 */
export const memoryInsertSql = (first: number): string => `
  insert into memories (run_workflow_id, temporal_run_id, task_id, user_id, content, embedding, input_truncated_from)
  values (${Array.from({ length: 7 }, (_, k) => `$${first + k}`).join(', ')})
  on conflict do nothing`;

export const memoryParams = (m: MemoryInput): unknown[] => [
  m.workflowId,
  m.temporalRunId,
  m.taskId,
  m.userId,
  m.content,
  JSON.stringify(m.embedding),
  m.inputTruncatedFrom ?? null,
];
