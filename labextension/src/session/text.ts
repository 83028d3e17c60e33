/**
 * The sentences of the notifications, built from a session or an event.
 * Toasts are short and may be cut: what is safe comes first, the file name
 * stands for the path (the panel shows the folder). Pure functions: no DOM,
 * no server.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import { ambientRestoreText } from '../ambient/text';
import { durationText, errorText, sentence } from '../format';
import {
  IEvent,
  IRebuildPlan,
  IRestoreAmbient,
  ISession,
  ISkippedObject
} from '../tokens';

/**
 * How many characters of a notification JupyterLab shows; it cuts the rest.
 */
const TOAST_LENGTH = 140;

/**
 * The toast of a resume: in place (a suspended kernel back on a GPU), or
 * where the kernel runs when that is not a GPU; what came back of the
 * kernel's ambient state (`ambient`, see {@link resumedAmbient}) and what
 * could not, with why; and how long it waited in line, when it did.
 */
export function resumedText(
  path: string,
  event: IEvent,
  trans: TranslationBundle,
  ambient: IRestoreAmbient | null = null
): string {
  const message = sentence(withoutAmbient(withoutPlan(event), ambient));
  let text =
    event.detail.in_place === true
      ? trans.__(
          'Resumed %1 in place: the same kernel, every variable as it was.',
          path
        )
      : event.detail.device === 'cpu'
        ? trans.__('Resumed %1 on the CPU. %2', path, message)
        : trans.__('Resumed %1. %2', path, message);
  const extra = ambientRestoreText(ambient, trans, message);
  if (extra) {
    text = `${text.trim()} ${extra}`;
  }
  const waited = Number(event.detail.waited_seconds);
  if (waited >= 1) {
    text +=
      ' ' + trans.__('It waited %1 for a GPU.', durationText(waited, trans));
  }
  // The checkpoint's id tells a user nothing a toast needs: it gives its
  // room to what came back when the whole would be cut.
  const id = event.detail.checkpoint_id;
  if (text.length > TOAST_LENGTH && typeof id === 'string' && id) {
    text = text.replace(` from checkpoint ${id}`, '');
  }
  return text.trim();
}

/**
 * A `resumed` event's message without the ambient part the server ends it
 * with (". Random state restored; 1 part … not restored: thread worker-1"),
 * before any rebuild plan: the toast says it itself, each name with why.
 */
function withoutAmbient(
  message: string,
  ambient: IRestoreAmbient | null
): string {
  if (!ambient) {
    return message;
  }
  const names = (ambient.not_restored ?? []).map(x => x.name).join(', ');
  const tail =
    (ambient.text ? `. ${ambient.text}` : '') + (names ? `: ${names}` : '');
  return tail && message.endsWith(tail)
    ? message.slice(0, -tail.length)
    : message;
}

/**
 * The ambient state a `resumed` event restored: the event's own when it
 * carries one, else the session's restore report when that is the same
 * resume (same checkpoint); `null` from an older server or agent.
 */
export function resumedAmbient(
  event: IEvent,
  session: ISession | null
): IRestoreAmbient | null {
  if (event.detail.ambient !== undefined) {
    return (event.detail.ambient as IRestoreAmbient | null) ?? null;
  }
  const restore = session?.restore;
  const checkpoint = event.detail.checkpoint_id;
  if (!restore || !checkpoint || restore.checkpoint_id !== checkpoint) {
    return null;
  }
  return restore.ambient ?? null;
}

/**
 * The server's message of a `resumed` event without the rebuild plan it
 * ends with (". Rebuild `h`: re-run cell [2] — 0.0 s"): a toast of its own
 * tells that plan, with its button.
 */
function withoutPlan(event: IEvent): string {
  const message = event.detail.message ?? '';
  const plan = event.detail.rebuild as IRebuildPlan | null | undefined;
  const tail = plan?.text ? `. Rebuild ${plan.text}` : null;
  return tail && message.endsWith(tail)
    ? message.slice(0, -tail.length)
    : message;
}

/**
 * The toast of an idle policy's warning: what it will do and when, the
 * policy's name, and what will not survive a pause.
 */
export function warnedText(
  path: string,
  event: IEvent,
  trans: TranslationBundle
): string {
  const action = event.detail.action ?? 'pause';
  const at = event.detail.pause_at
    ? new Date(event.detail.pause_at).toLocaleTimeString()
    : '';
  const policy = event.reason.replace(/^policy:/, '');
  let text: string;
  if (action === 'cull') {
    text = trans.__(
      '%1 is idle: its kernel will be shut down at %2 without saving (policy %3).',
      path,
      at,
      policy
    );
  } else if (action === 'pause') {
    text = trans.__(
      '%1 is idle: it will be paused at %2 to release its GPU (policy %3).',
      path,
      at,
      policy
    );
  } else {
    text = trans.__('%1 has been idle since %2 (policy %3).', path, at, policy);
  }
  return text + skippedText(event.detail.skipped, trans, true);
}

/**
 * " Not saved: a, b." for the objects a pause skipped; '' when none.
 */
export function skippedText(
  skipped: ISkippedObject[] | null | undefined,
  trans: TranslationBundle,
  future = false
): string {
  if (!skipped || !skipped.length) {
    return '';
  }
  const names = skipped.map(s => s.name).join(', ');
  return (
    ' ' +
    (future
      ? trans.__('Will not survive: %1.', names)
      : trans.__('Not saved: %1.', names))
  );
}

/**
 * The toast of a failed pause. A refused pause leaves the kernel running
 * with its variables; that is said first.
 */
export function pauseFailedText(
  path: string,
  session: ISession | null,
  fallback: string,
  trans: TranslationBundle
): string {
  const error = session?.error;
  const running = session?.state === 'active' || session?.state === 'idle';
  if (session?.state === 'suspended' && error && typeof error !== 'string') {
    return trans.__(
      '%1 is still suspended with every variable in its kernel; Resume brings it back in place. %2',
      path,
      sentence(error.message)
    );
  }
  if (running && error && typeof error !== 'string' && error.state_intact) {
    // What is safe comes first: a toast may cut a long error short.
    return trans.__(
      'Pause of %1 failed; the kernel is still running with all its variables. %2',
      path,
      sentence(error.message)
    );
  }
  return trans.__(
    'Pause of %1 failed: %2',
    path,
    failureText(session, fallback, trans)
  );
}

/**
 * What failed and what is safe, preferring the session's error record
 * (it says whether the state is intact).
 */
export function failureText(
  session: ISession | null,
  fallback: string,
  trans: TranslationBundle
): string {
  const error = session?.error;
  if (!error) {
    return fallback;
  }
  return errorText(error, trans);
}
