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
