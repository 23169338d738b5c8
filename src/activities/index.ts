import type pg from 'pg';
import type { ModelProvider } from '../models/provider';
import { createRunActivities } from './run-activities';
import { createReportActivities, type ReportActivityOptions } from './report-activities';

export interface ActivityDeps extends ReportActivityOptions {
  pool: pg.Pool;
  provider: ModelProvider;
  workerId: string;
}

/** Every activity the worker registers. Workflows import only this type, never the implementations. */
export const createActivities = (deps: ActivityDeps) => ({
  ...createRunActivities(deps),
  ...createReportActivities(deps),
});

export type Activities = ReturnType<typeof createActivities>;
