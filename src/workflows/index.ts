// Everything the worker's workflow bundle contains. Workflow code is deterministic: no Node imports, no I/O, no clocks.
export { scheduledRun } from './scheduled-run';
export { monthlyReport } from './monthly-report';
export { rollupRefresh } from './rollup-refresh';
export { budgetSweep } from './budget-sweep';
export { reconcileDaily } from './reconcile-daily';
