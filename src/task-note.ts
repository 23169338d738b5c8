import { displayUsd } from './money';

/**
 * The note of a task's schedule (Temporal's `state.note`, shown by the Web UI and `temporal schedule describe`). Temporal
 * compiles a cron string into calendars and shows those, so the note leads with what the user wrote: the cron, its zone
 * and the task ID. Temporal also writes a pause's reason into the note; a paused schedule's note keeps the line and
 * appends the reason after " · paused: ", so it still says why it is paused.
 */

const LINE_START = 'cron "';
const PAUSED = ' · paused: ';
const NO_REASON = 'no reason given';

/** The note for a task: the cron line, and while paused the reason. */
export const taskNoteOf = (task: { id: string; cron: string; timezone: string }, pauseReason?: string): string => {
  const line = `${LINE_START}${task.cron}" in ${task.timezone}, task ${task.id} (cronledger tasks apply)`;
  return pauseReason === undefined ? line : `${line}${PAUSED}${pauseReason}`;
};

/**
 * Why a paused schedule is paused, read from its note: the text after our line's " · paused: ", or the whole note when
 * someone else wrote it (a pause in the Web UI or with `temporal schedule toggle --pause --reason`).
 */
export function pauseReasonIn(note: string | undefined): string {
  const text = note?.trim() ?? '';
  if (!text.startsWith(LINE_START)) return text || NO_REASON;
  const at = text.indexOf(PAUSED);
  return at >= 0 ? text.slice(at + PAUSED.length) : NO_REASON;
}

/** The note a task's schedule should carry in this state: the line for the task as applied, plus the pause reason it already gives. */
export const wantedTaskNote = (task: { id: string; cron: string; timezone: string }, state: { paused: boolean; note?: string }): string =>
  state.paused ? taskNoteOf(task, pauseReasonIn(state.note)) : taskNoteOf(task);

/** The pause reason of a task the tasks file marks `"paused": true`. */
export const PAUSED_BY_APPLY = 'paused by cronledger tasks apply';

/**
 * The state `tasks apply` leaves a task's schedule in, from the state it is in: paused as the tasks file says, except
 * that a pause for budget (onBudgetExhausted "pause") is the budget sweeper's to end. A schedule paused already keeps
 * its reason; one this apply pauses gets PAUSED_BY_APPLY.
 */
export function wantedTaskState(
  task: { id: string; cron: string; timezone: string; paused: boolean },
  state: { paused: boolean; note?: string },
): { paused: boolean; note: string } {
  const paused = task.paused || (state.paused && isBudgetPause(state.note));
  if (!paused) return { paused, note: taskNoteOf(task) };
  return { paused, note: state.paused ? wantedTaskNote(task, state) : taskNoteOf(task, PAUSED_BY_APPLY) };
}

/** How the pause reason that cronledger writes when a task's budget ran out (onBudgetExhausted "pause") begins. */
const BUDGET_PAUSE = 'budget exhausted: ';

/** The pause reason of a task paused because its user's money ran out: the reason, the month and its zone. */
export const budgetPauseReason = (b: { userId: string; month: string; timeZone: string; limitUsd: string | null }): string =>
  `${BUDGET_PAUSE}${b.userId} reached the monthly limit${b.limitUsd === null ? '' : ` of ${displayUsd(b.limitUsd)}`} for ${b.month} (${b.timeZone}); ` +
  'the budget sweeper resumes it when the month turns over or the limit is raised';

/** Whether a paused schedule's note says cronledger paused it for budget (and so the budget sweeper may resume it). */
export const isBudgetPause = (note: string | undefined): boolean => pauseReasonIn(note).startsWith(BUDGET_PAUSE);

/** Our line of a task schedule's note, without a pause reason; undefined when the note is not ours. */
function ownLine(note: string | undefined): string | undefined {
  const text = note?.trim() ?? '';
  if (!text.startsWith(LINE_START)) return undefined;
  const at = text.indexOf(PAUSED);
  return at >= 0 ? text.slice(0, at) : text;
}

/** The note of a schedule being paused for this reason: our line kept (someone else's note replaced), then the reason. */
export function notePausedFor(note: string | undefined, reason: string): string {
  const line = ownLine(note);
  return line === undefined ? reason : `${line}${PAUSED}${reason}`;
}

/** The note of a schedule resumed: our line without the pause reason ('' when the note is not ours). */
export const noteResumed = (note: string | undefined): string => ownLine(note) ?? '';
