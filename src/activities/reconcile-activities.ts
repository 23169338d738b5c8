import { ApplicationFailure } from '@temporalio/activity';
import type pg from 'pg';
import { UserError } from '../errors';
import { bookReconciliation, summarise, type ImportSummary } from '../reconcile/book';
import type { Provider } from '../reconcile/provider-rows';
import { readProviderReports } from '../reconcile/read-reports';

/**
 * What the reconcile worker (`cronledger reconcile worker`) alone holds: the operator role's pool (booking goes through
 * record_reconciliation) and an environment with the providers' admin keys and cronledger's projects. The main worker
 * registers none of this.
 */
export interface ReconcileActivityDeps {
  operatorPool: pg.Pool;
  env: NodeJS.ProcessEnv;
  /** Take all of the organization's spend as cronledger's (the worker's --whole-organization). */
  wholeOrganization: boolean;
}

/** One provider's import for a day range: what `cronledger reconcile <provider> --json` prints, without the keys. */
export interface ProviderImport extends ImportSummary {
  provider: Provider;
  from: string;
  to: string;
  importId: string;
  pages: number;
  pagesSha256: string;
}

export const createReconcileActivities = (deps: ReconcileActivityDeps) => ({
  /**
   * `cronledger reconcile <provider> --from --to` from the admin API: the same reading and booking. An import of pages
   * already imported books nothing, so a retried attempt is harmless. A missing admin key or scope (UserError) fails
   * at once: retrying can't set it.
   */
  async reconcileProvider(input: { provider: Provider; from: string; to: string }): Promise<ProviderImport> {
    try {
      const read = await readProviderReports({ ...input, files: [], wholeOrganization: deps.wholeOrganization, env: deps.env });
      const booked = await bookReconciliation(deps.operatorPool, read);
      return {
        ...input,
        importId: booked.importId,
        pages: read.pages,
        pagesSha256: read.pagesSha256,
        ...summarise(booked.keys),
      };
    } catch (err) {
      if (err instanceof UserError) throw ApplicationFailure.nonRetryable(err.message, 'UserError');
      throw err;
    }
  },
});

export type ReconcileActivities = ReturnType<typeof createReconcileActivities>;
