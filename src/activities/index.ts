import type pg from 'pg';
import { MockProvider } from '../models/mock-provider';
import type { ModelProvider } from '../models/provider';
import { createBudgetActivities, type BudgetActivityDeps } from './budget-activities';
import { createRunActivities } from './run-activities';
import { createReportActivities, type ReportActivityOptions } from './report-activities';

export interface ActivityDeps extends ReportActivityOptions, Omit<BudgetActivityDeps, 'pool' | 'simulateHonoured' | 'countPromptTokens'> {
  pool: pg.Pool;
  provider: ModelProvider;
  workerId: string;
}

/** Every activity the worker registers. Workflows import only this type, never the implementations. */
export const createActivities = (deps: ActivityDeps) => ({
  ...createRunActivities(deps),
  ...createReportActivities(deps),
  // a task's `simulate` profile forges token counts: only the mock provider gets it, never a provider that bills
  ...createBudgetActivities({
    ...deps,
    simulateHonoured: deps.provider instanceof MockProvider,
    // the prompt as the provider counts it, for a model whose tokenizer cronledger lacks (Anthropic's count_tokens)
    countPromptTokens: deps.provider.countPromptTokens?.bind(deps.provider),
  }),
});

export type Activities = ReturnType<typeof createActivities>;
