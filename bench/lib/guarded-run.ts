import type { PlannedCall } from '../../src/budgets/reserve';
import { worstCaseOf } from '../../src/budgets/worst-case';

const worst = worstCaseOf({ prompt: 'Summarise the day for the team.', maxOutputTokens: 1024 });

/** The calls a guarded run of the budget benches reserves together: a chat and an embedding, at their worst case. */
export const GUARDED_RUN_CALLS: PlannedCall[] = [
  { step: 'chat', attempt: 1, kind: 'chat', model: 'openai/gpt-4o-mini', worstCase: worst.chat },
  { step: 'embed', attempt: 1, kind: 'embedding', model: 'openai/text-embedding-3-small', worstCase: worst.embedding },
];
