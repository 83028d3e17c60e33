/**
 * The words of a pause, or a cancel, that an admin asked for on the
 * user's behalf (the event's `detail.by`): who did it and what they said,
 * so the user learns it from JupyterLab rather than from a colleague.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import { IEvent } from '../tokens';

/**
 * The event types an admin may cause on the user's behalf.
 */
export const ON_BEHALF_EVENTS: ReadonlyArray<string> = ['paused', 'cancelled'];

/**
 * The admin an event names (`detail.by`); `null` when the user, a policy
 * or the server itself caused it.
 */
export function onBehalfOf(event: IEvent): string | null {
  const by = event.detail.by;
  return ON_BEHALF_EVENTS.includes(event.type) && typeof by === 'string' && by
    ? by
    : null;
}

/**
 * "Paused by an admin (carol): maintenance at 9. train.ipynb is saved …";
 * the cancel of a pause or of a resume waiting for a GPU likewise. Empty
 * for an event no admin caused.
 */
export function onBehalfText(
  path: string,
  event: IEvent,
  trans: TranslationBundle
): string {
  const by = onBehalfOf(event);
  if (by === null) {
    return '';
  }
  const said = Private.said(event.detail.admin_message);
  if (event.type === 'paused') {
    const head = said
      ? trans.__('Paused by an admin (%1): %2', by, said)
      : trans.__('Paused by an admin (%1).', by);
    return `${head} ${trans.__(
      '%1 is saved with its variables: resume it when you are ready.',
      path
    )}`;
  }
  const resume = event.detail.operation === 'resume';
  const head = resume
    ? trans.__('The resume of %1 was cancelled by an admin (%2)', path, by)
    : trans.__('The pause of %1 was cancelled by an admin (%2)', path, by);
  const after = resume
    ? trans.__('It stays paused.')
    : trans.__('Its kernel runs on, untouched.');
  return said ? `${head}: ${said} ${after}` : `${head}. ${after}`;
}

/**
 * Module-private helpers.
 */
namespace Private {
  /**
   * The admin's words as they wrote them, ending in a full stop; empty
   * when they wrote none.
   */
  export function said(message: unknown): string {
    const text = typeof message === 'string' ? message.trim() : '';
    return !text || /[.!?]$/.test(text) ? text : `${text}.`;
  }
}
