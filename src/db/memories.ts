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
 * One run's memory: its reply and the reply's embedding, which its embed step stored under `embeddingKey`
 * (stageEmbedding), or, when that store failed, the vector itself.
 */
export interface MemoryInput {
  workflowId: string;
  temporalRunId: string | null;
  taskId: string;
  userId: string;
  content: string;
  embeddingKey?: string;
  embedding?: number[];
  inputTruncatedFrom?: number | null;
}

/**
 * Stores an embedding call's vector under its call's key (`<runId>:embed:<attempt>`, as its ledger entry), once: the
 * run's completion reads it from there into the memory, so that the vector stays out of workflow history.
 */
export async function stageEmbedding(db: pg.Pool, callKey: string, vector: number[]): Promise<void> {
  // named: each connection parses and plans it once, as every other statement of a run's path
  await db.query({ name: 'stage-embedding', text: 'select stage_embedding($1, $2)', values: [callKey, JSON.stringify(vector)] });
}

/**
 * store_memory_and_complete_run's memory parameters, in order. The embedding is the vector given, else the one staged
 * under the key; neither is a not-null violation, never a memory without its embedding. `inputTruncatedFrom` says the
 * embedding covers only the reply's first tokens, up to the model's limit.
 */
export const memoryParams = (m: MemoryInput): unknown[] => [
  m.workflowId,
  m.temporalRunId,
  m.taskId,
  m.userId,
  m.content,
  m.embedding ? JSON.stringify(m.embedding) : null,
  m.embeddingKey ?? null,
  m.inputTruncatedFrom ?? null,
];
