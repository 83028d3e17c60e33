/**
 * The words of a session whose kernel cannot be paused (its kernelspec is
 * not Python, or its agent cannot run): the server says so in the
 * session's `pausable`, once, and an idle policy then keeps the kernel
 * running or shuts it down. Pausing it is never offered.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import { IEvent, IPausable, ISession } from '../tokens';

/**
 * The session's `pausable` when its kernel is known not to be pausable;
 * `null` while it may be (known pausable, or not known yet).
 */
export function unpausable(
  session: Pick<ISession, 'pausable'> | null
): IPausable | null {
  const pausable = session?.pausable ?? null;
  return pausable && !pausable.ok ? pausable : null;
}

/**
 * "Cannot be paused: pause is not supported for bash kernels"; empty for a
 * session that may be paused.
 */
export function cannotPauseText(
  session: Pick<ISession, 'pausable'> | null,
  trans: TranslationBundle
): string {
  const pausable = unpausable(session);
  if (!pausable) {
    return '';
  }
  return pausable.message
    ? trans.__('Cannot be paused: %1', pausable.message)
    : trans.__('Cannot be paused');
}

/**
 * The one notification of a session that became unpausable: what it
 * cannot do, and what that means for its GPU.
 */
export function unpausableEventText(
  path: string,
  event: IEvent,
  trans: TranslationBundle
): string {
  const why = unpausable({
    pausable: (event.detail.pausable as IPausable | undefined) ?? null
  })?.message;
  return why
    ? trans.__(
        '%1 cannot be paused: %2. Its GPU is not given back by pausing: shut its kernel down when you are done with it.',
        path,
        why
      )
    : trans.__(
        '%1 cannot be paused. Its GPU is not given back by pausing: shut its kernel down when you are done with it.',
        path
      );
}
