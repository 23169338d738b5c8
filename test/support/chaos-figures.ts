import type pg from 'pg';
import type { BilledRequest } from './fake-openai';
import type { KillEvent } from './worker-processes';

/**
 * What a fault-injection scenario measured, reconciled from three independent records: the fake provider's log of
 * billed requests, the ledger (usage_ledger.provider_request_id) and the claims (runs, run_duplicates).
 */
export interface ChaosFigures {
  scenario: string;
  slots: number;
  /** Slots whose claim ended completed. */
  completed: number;
  /** Slots whose claim is anything else (failed, running). */
  notCompleted: number;
  /**
   * Executions beyond one per slot that ran the whole run (their embedding, the last model step, is in the ledger):
   * second runs of a slot. A failed execution retried on purpose is not one. Must be 0.
   */
  duplicates: number;
  /** Executions the claim stopped before any model call (they cost nothing). */
  stoppedByClaim: number;
  billed: number;
  ledgerRows: number;
  /** Ledger rows whose provider_request_id the provider never billed. Must be 0. */
  ledgerRowsNotBilled: number;
  /** Billed requests with no ledger row that a SIGKILL explains: their process died while they were in flight. */
  unbookedExplained: number;
  /** Billed requests with no ledger row and no kill to explain them: lost money. Must be 0. */
  unbookedUnexplained: number;
  elapsedMs: number;
  /** Anything the scenario adds (kills, outage length, the window's size, ...). */
  extra: Record<string, string | number>;
}

export interface UnbookedRequest {
  billed: BilledRequest;
  /** The kill of the process that sent it, if that process died before it could book the answer (killExplaining). */
  kill?: KillEvent;
}

/** Usage rows of these tasks' runs. */
async function ledgerRows(pool: pg.Pool, taskIds: string[]) {
  const { rows } = await pool.query<{ provider_request_id: string | null; run_id: string; workflow_id: string; kind: string }>(
    `select provider_request_id, run_id, workflow_id, kind from usage_ledger where entry_type = 'usage' and task_id = any($1)`,
    [taskIds],
  );
  return rows;
}

/**
 * Reconciles billed requests against the ledger and the claims. `billed` must hold only this scenario's requests;
 * `kills` the scenario's SIGKILLs (none when it killed nothing, and then every unbooked request is unexplained).
 */
export async function reconcile(
  pool: pg.Pool,
  opts: {
    scenario: string;
    taskIds: string[];
    slots: number;
    billed: BilledRequest[];
    kills?: KillEvent[];
    killWindowMs?: number;
    startedAt: number;
    extra?: Record<string, string | number>;
  },
): Promise<{ figures: ChaosFigures; unbooked: UnbookedRequest[] }> {
  const rows = await ledgerRows(pool, opts.taskIds);
  const claims = await pool.query<{ status: string; n: string }>(
    'select status, count(*) as n from runs where task_id = any($1) group by status',
    [opts.taskIds],
  );
  const count = (status: string) => Number(claims.rows.find((r) => r.status === status)?.n ?? 0);
  const stopped = await pool.query<{ n: string }>('select count(*) as n from run_duplicates where task_id = any($1)', [opts.taskIds]);

  // run_id names the execution (Temporal's run ID), workflow_id the slot's workflow.
  const executionsBySlot = new Map<string, Set<string>>();
  for (const r of rows.filter((r) => r.kind === 'embedding')) {
    executionsBySlot.set(r.workflow_id, (executionsBySlot.get(r.workflow_id) ?? new Set()).add(r.run_id));
  }
  const duplicates = [...executionsBySlot.values()].reduce((n, s) => n + s.size - 1, 0);

  const booked = new Set(rows.map((r) => r.provider_request_id).filter((id): id is string => id !== null));
  const billedIds = new Set(opts.billed.map((b) => b.id));
  const unbooked: UnbookedRequest[] = opts.billed
    .filter((b) => !booked.has(b.id))
    .map((b) => ({ billed: b, kill: killExplaining(b, opts.kills ?? [], opts.killWindowMs ?? 0) }));
  const explained = unbooked.filter((u) => u.kill);

  const figures: ChaosFigures = {
    scenario: opts.scenario,
    slots: opts.slots,
    completed: count('completed'),
    notCompleted: opts.slots - count('completed'),
    duplicates,
    stoppedByClaim: Number(stopped.rows[0].n),
    billed: opts.billed.length,
    ledgerRows: rows.length,
    ledgerRowsNotBilled: rows.filter((r) => !r.provider_request_id || !billedIds.has(r.provider_request_id)).length,
    unbookedExplained: explained.length,
    unbookedUnexplained: unbooked.length - explained.length,
    elapsedMs: Date.now() - opts.startedAt,
    extra: { ...opts.extra },
  };
  if (explained.length > 0) {
    // How long before its process died each lost answer had been generated (negative: the reply was still being
    // generated when the process died). The largest is the window that could not be closed, as measured here.
    const gaps = explained.map((u) => (u.kill as KillEvent).at - u.billed.billedAt);
    figures.extra['lost answer: billed-to-kill ms, max'] = Math.max(...gaps);
    figures.extra['lost answer: billed-to-kill ms, min'] = Math.min(...gaps);
    // Requests the fake read only after their sender's SIGKILL (written to the socket just before it): see killExplaining.
    figures.extra['lost answer: read after its sender was killed'] = explained.filter(
      (u) => u.billed.receivedAt > (u.kill as KillEvent).at,
    ).length;
  }
  return { figures, unbooked };
}

/**
 * The kill that explains why a billed request has no ledger row: the death of the process that sent it, at most
 * `windowMs` after its answer was generated (a live worker books an answer well within that).
 *
 * The kill is not required to come after the fake received the request. An incarnation sends nothing once dead, but
 * a request it wrote just before its SIGKILL can still sit in the socket and be read by the fake (in the test
 * process, whose event loop is busy with the kill) a few milliseconds after the kill's timestamp. Requiring
 * `kill.at >= receivedAt` would make such a request look like lost money.
 */
export function killExplaining(billed: BilledRequest, kills: KillEvent[], windowMs: number): KillEvent | undefined {
  return kills.find(
    (k) => k.incarnation === billed.caller && billed.receivedAt - k.at <= READ_AFTER_KILL_MS && k.at - billed.billedAt <= windowMs,
  );
}

/**
 * How long after its sender's SIGKILL the fake may still read a request: the socket's leftovers. Anything later can't
 * have come from that process, and means the harness named its callers wrong.
 */
export const READ_AFTER_KILL_MS = 1_000;

/** Why a billed request is unbooked, for a failure message: who sent it, when, and when that process died (if it did). */
export function describeUnbooked(u: UnbookedRequest, kills: KillEvent[]): string {
  const { billed } = u;
  const death = kills.find((k) => k.incarnation === billed.caller);
  const when = death
    ? `; ${billed.caller} was killed ${death.at - billed.receivedAt} ms after the request arrived, ${death.at - billed.billedAt} ms after it was billed`
    : `; ${billed.caller} was never killed`;
  return `${billed.id} from ${billed.caller} billed at ${new Date(billed.billedAt).toISOString()}${when}`;
}

/** The figures as a small table, with the command that produced them. */
export function formatFigures(f: ChaosFigures, command?: string): string {
  const lines = [
    ...(command ? [`$ ${command}`] : []),
    `${f.scenario}`,
    `  slots ${f.slots}, completed ${f.completed}, not completed ${f.notCompleted}, duplicates ${f.duplicates}, stopped by the claim ${f.stoppedByClaim}`,
    `  billed requests ${f.billed}, ledger rows ${f.ledgerRows}, ledger rows not billed ${f.ledgerRowsNotBilled}`,
    `  unbooked and explained by a kill ${f.unbookedExplained}, unbooked and unexplained ${f.unbookedUnexplained}`,
    `  elapsed ${(f.elapsedMs / 1000).toFixed(1)} s`,
    ...Object.entries(f.extra).map(([k, v]) => `  ${k}: ${v}`),
  ];
  return lines.join('\n');
}
