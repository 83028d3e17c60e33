/**
 * The texts of suspend in place, shared by the panel, the notebook toolbar,
 * the status bar and the capacity line: a suspended kernel has released its
 * GPU but lives on with every variable, so it is never called paused, and
 * Resume brings it back in place; and the toast of a suspend. Pure
 * functions: no DOM, no server.
 */
import { suspendPhase } from '../actions';
import {
  bytesText,
  clockText,
  durationText,
  progressRatio,
  Trans
} from '../format';
import { IEvent, IPauseTier, ISession } from '../tokens';

/**
 * A short duration with a tenth of a second below ten seconds ("0.9 s"),
 * as a GPU release takes; coarser above, as {@link durationText}.
 */
export function secondsText(seconds: number, trans: Trans): string {
  return seconds < 10
    ? trans.__('%1 s', Math.max(0, seconds).toFixed(1))
    : durationText(seconds, trans);
}

/**
 * What Resume does for a suspended kernel: the tooltip of every Resume
 * offered for one.
 */
export function resumeInPlaceHint(trans: Trans): string {
  return trans.__('Resume in place: the same kernel, back on a GPU');
}

/**
 * The notebook toolbar's label of a suspended session, which a click
 * resumes: "Suspended · writing 42% — Resume", "Suspended — Resume",
 * "Suspended, not saved — Resume".
 */
export function suspendedLabel(session: ISession, trans: Trans): string {
  switch (suspendPhase(session)) {
    case 'writing': {
      const ratio = progressRatio(session);
      return ratio === null
        ? trans.__('Suspended · writing… — Resume')
        : trans.__('Suspended · writing %1% — Resume', Math.round(ratio * 100));
    }
    case 'failed':
      return trans.__('Suspended, not saved — Resume');
    default:
      return trans.__('Suspended — Resume');
  }
}

/**
 * The facts of a suspended session for a panel row: "GPU released in
 * 0.9 s", "12.4 GB in host memory"; those the server did not measure are
 * left out.
 */
export function suspendedDetails(session: ISession, trans: Trans): string[] {
  const record = session.suspended;
  const parts: string[] = [];
  if (typeof record?.gpu_released_seconds === 'number') {
    parts.push(
      trans.__(
        'GPU released in %1',
        secondsText(record.gpu_released_seconds, trans)
      )
    );
  } else {
    parts.push(trans.__('GPU released'));
  }
  if (typeof record?.host_bytes === 'number') {
    parts.push(trans.__('%1 in host memory', bytesText(record.host_bytes)));
  }
  return parts;
}

/**
 * The sentence of a suspended session, for a panel row and the tooltips.
 *
 * Written and kept: composed from `kept_until`, so the time is on the
 * user's clock (the server's message gives it on the server's). Otherwise
 * the server's message, or, without one, the same words made here: while
 * writing, that the GPU is released; after a failure, the server's error,
 * and that every variable is still in the kernel.
 */
export function suspendedMessage(
  session: ISession,
  trans: Trans,
  now: number
): string {
  switch (suspendPhase(session)) {
    case 'written': {
      const until = clockText(session.suspended?.kept_until, trans, now);
      return until
        ? trans.__(
            'Suspended — checkpoint saved; the kernel is kept for a fast resume until %1',
            until
          )
        : trans.__(
            'Suspended — checkpoint saved; the kernel is kept for a fast resume'
          );
    }
    case 'failed': {
      if (session.message) {
        return session.message;
      }
      // The server's error says what failed ("checkpoint not written: …").
      const error = session.error;
      const why = (typeof error === 'string' ? error : (error?.message ?? ''))
        .trim()
        .replace(/[.!?]$/, '');
      return trans.__(
        'Suspended — %1. Every variable is still in the kernel; Resume brings it back in place',
        why || trans.__('checkpoint not written')
      );
    }
    case 'writing':
      return (
        session.message ||
        trans.__('Suspended — GPU released; writing checkpoint')
      );
    default:
      return session.message ?? '';
  }
}

/**
 * The pause tier in force, in one line: "Pause tier: suspend in place —
 * the CUDA driver 570.86 has the checkpoint API".
 */
export function tierText(tier: IPauseTier, trans: Trans): string {
  const name =
    tier.name === 'suspend'
      ? trans.__('suspend in place')
      : tier.name === 'checkpoint'
        ? trans.__('checkpoint')
        : tier.name;
  return tier.reason
    ? trans.__('Pause tier: %1 — %2', name, tier.reason)
    : trans.__('Pause tier: %1', name);
}

/**
 * What the pause tier in force means for a pause and a resume, for the
 * tooltip of its line.
 */
export function tierHint(tier: IPauseTier, trans: Trans): string {
  switch (tier.name) {
    case 'suspend':
      return trans.__(
        'A pause releases the GPU first, keeping the kernel alive with every variable (suspended), then writes the checkpoint behind it. Resuming a suspended kernel brings it back in place.'
      );
    case 'checkpoint':
      return trans.__(
        'A pause writes the checkpoint, then shuts the kernel down. Resume starts a kernel and restores the variables into it.'
      );
    default:
      return '';
  }
}

/**
 * The toast of a suspend: the GPU is released and the kernel lives on with
 * every variable (and the host memory that takes) while its checkpoint is
 * written.
 */
export function suspendedEventText(
  path: string,
  event: IEvent,
  trans: Trans
): string {
  const seconds = event.detail.gpu_released_seconds;
  const hostBytes = event.detail.host_bytes;
  const released =
    typeof seconds === 'number'
      ? trans.__('GPU released in %1', secondsText(seconds, trans))
      : trans.__('GPU released');
  return typeof hostBytes === 'number'
    ? trans.__(
        'Suspended %1: %2; every variable stays in the kernel (%3 of host memory) while its checkpoint is written.',
        path,
        released,
        bytesText(hostBytes)
      )
    : trans.__(
        'Suspended %1: %2; every variable stays in the kernel while its checkpoint is written.',
        path,
        released
      );
}
