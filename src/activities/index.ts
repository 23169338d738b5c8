import type pg from 'pg';
import type { ModelProvider } from '../models/provider';
import { createBudgetActivities, type BudgetActivityDeps } from './budget-activities';
import { createRunActivities } from './run-activities';
import { createReportActivities, type ReportActivityOptions } from './report-activities';

export interface ActivityDeps extends ReportActivityOptions, Omit<BudgetActivityDeps, 'pool'> {
  pool: pg.Pool;
  provider: ModelProvider;
  workerId: string;
}

/** Every activity the worker registers. Workflows import only this type, never the implementations. */
export const createActivities = (deps: ActivityDeps) => ({
  ...createRunActivities(deps),
  ...createReportActivities(deps),
  ...createBudgetActivities(deps),
});

export type Activities = ReturnType<typeof createActivities>;
