/**
 * Short texts for sizes, durations and session states, shared by the panel,
 * the notebook toolbar, the status bar and the notifications so that they
 * all say the same thing the same way. Pure functions: no DOM, no server.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import { isCapacityTimeout, suspendPhase } from './actions';
import { ISession, ISessionError, SessionState } from './tokens';

/**
 * The part of a translation bundle these helpers use.
 */
export type Trans = Pick<TranslationBundle, '__'>;

/**
 * A byte count in decimal units, as the server's messages write it
 * ("6.1 GB"); GPU memory is conventionally binary, see {@link gibibytes}.
 */
export function bytesText(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !isFinite(bytes)) {
    return '';
  }
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let value = Math.max(0, bytes);
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  const digits = unit === 0 || value >= 100 ? 0 : 1;
  return `${value.toFixed(digits)} ${units[unit]}`;
}

/**
 * GPU memory in GiB, as `nvidia-smi` users read it ("14.2 GiB").
 */
export function gibibytes(bytes: number): string {
  const gib = bytes / 1024 ** 3;
  if (gib >= 1) {
    return `${gib.toFixed(1)} GiB`;
  }
  return `${Math.max(0, Math.round(bytes / 1024 ** 2))} MiB`;
}

/**
 * A duration in seconds, coarse and short: "45 s", "12 min", "3.5 h", "2 d".
 */
export function durationText(seconds: number, trans: Trans): string {
  const s = Math.max(0, seconds);
  if (s < 90) {
    return trans.__('%1 s', Math.round(s));
  }
  if (s < 90 * 60) {
    return trans.__('%1 min', Math.round(s / 60));
  }
  if (s < 48 * 3600) {
    return trans.__('%1 h', (s / 3600).toFixed(1));
  }
  return trans.__('%1 d', Math.round(s / 86400));
}

/**
 * A countdown in seconds as a clock: "4:05", "1:02:03"; "0:00" once due.
 */
export function countdownText(seconds: number): string {
  const total = Math.max(0, Math.ceil(seconds));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  const pad = (n: number): string => String(n).padStart(2, '0');
  return h > 0 ? `${h}:${pad(m)}:${pad(s)}` : `${m}:${pad(s)}`;
}

/**
 * A time of day on the user's clock (local time, 24 h): "14:05" today,
 * "14:05 tomorrow", "14:05 on 2026-12-09" further off; '' without a time.
 */
export function clockText(
  iso: string | null | undefined,
  trans: Trans,
  now: number
): string {
  const when = iso ? new Date(iso) : null;
  if (!when || isNaN(when.getTime())) {
    return '';
  }
  const pad = (n: number): string => String(n).padStart(2, '0');
  const clock = `${pad(when.getHours())}:${pad(when.getMinutes())}`;
  const today = new Date(now);
  const days = Math.round(
    (new Date(when.getFullYear(), when.getMonth(), when.getDate()).getTime() -
      new Date(
        today.getFullYear(),
        today.getMonth(),
        today.getDate()
      ).getTime()) /
      86400000
  );
  if (days === 0) {
    return clock;
  }
  if (days === 1) {
    return trans.__('%1 tomorrow', clock);
  }
  const date = `${when.getFullYear()}-${pad(when.getMonth() + 1)}-${pad(when.getDate())}`;
  return trans.__('%1 on %2', clock, date);
}

/**
 * Seconds from `now` until an ISO time; negative when past, `null` when
 * there is no time.
 */
export function secondsUntil(iso: string | null, now: number): number | null {
  if (!iso) {
    return null;
  }
  const when = Date.parse(iso);
  return isNaN(when) ? null : (when - now) / 1000;
}

/**
 * The badge text of a state: a word, so the state never rests on colour.
 */
export function stateLabel(state: SessionState | string, trans: Trans): string {
  switch (state) {
    case 'active':
      return trans.__('active');
    case 'idle':
      return trans.__('idle');
    case 'pausing':
      return trans.__('pausing');
    case 'suspended':
      return trans.__('suspended');
    case 'paused':
      return trans.__('paused');
    case 'waiting':
      return trans.__('waiting');
    case 'restoring':
      return trans.__('restoring');
    case 'failed':
      return trans.__('failed');
    default:
      return String(state);
  }
}

/**
 * Progress of a pause, restore or rebuild as a ratio in [0, 1]; `null`
 * when unknown.
 */
export function progressRatio(session: ISession): number | null {
  const p = session.progress;
  if (!p || !p.total_bytes) {
    return null;
  }
  return Math.min(1, Math.max(0, p.done_bytes / p.total_bytes));
}

/**
 * Whether a session's progress counts cells (a rebuild re-running them),
 * not bytes: such counts are never shown as sizes.
 */
export function countsCells(session: ISession): boolean {
  const p = session.progress;
  return !!p && (p.unit === 'cells' || p.phase === 'rebuilding');
}

/**
 * Progress as its unit reads: "1.2 GB of 6.1 GB" for bytes, "cell 2 of 3"
 * for a rebuild (the cell running: one past those done, the last once all
 * are), or what is known of it.
 */
export function progressText(session: ISession, trans: Trans): string {
  const p = session.progress;
  if (!p) {
    return '';
  }
  if (countsCells(session)) {
    const total = p.total_bytes ?? 0;
    if (total <= 0) {
      return '';
    }
    const current = Math.min(total, Math.max(1, Math.floor(p.done_bytes) + 1));
    return trans.__('cell %1 of %2', current, total);
  }
  if (p.total_bytes) {
    return trans.__(
      '%1 of %2',
      bytesText(p.done_bytes),
      bytesText(p.total_bytes)
    );
  }
  return p.done_bytes ? bytesText(p.done_bytes) : '';
}

/**
 * A running rebuild in words, for every view that shows one: "Rebuilding:
 * cell 2 of 3", or "Rebuilding…" before the count is known; '' when the
 * session is not rebuilding.
 */
export function rebuildingText(session: ISession, trans: Trans): string {
  if (!countsCells(session)) {
    return '';
  }
  const where = progressText(session, trans);
  return where ? trans.__('Rebuilding: %1', where) : trans.__('Rebuilding…');
}

/**
 * The GPU a session holds: "GPU 0 · 14.2 GiB" (index when the server gives
 * one, else a short device UUID); '' when it holds none.
 */
export function gpuText(session: ISession, trans: Trans): string {
  const gpu = session.gpu;
  if (!gpu || !gpu.memory_bytes) {
    return '';
  }
  const indices = gpu.indices;
  let device: string;
  if (indices && indices.length) {
    device = trans.__('GPU %1', indices.join(', '));
  } else if (gpu.devices.length) {
    device = gpu.devices.map(d => d.slice(0, 12)).join(', ');
  } else {
    device = trans.__('GPU');
  }
  return `${device} · ${gibibytes(gpu.memory_bytes)}`;
}

/**
 * Where a resume placed a running kernel whose GPU memory is not measured
 * (no NVML, or nothing allocated yet): "on GPU" — the capacity queue gave it
 * a GPU, so "No GPU" would contradict the notification that said so — or
 * "on CPU"; '' for a kernel no resume placed. `status` gives the status
 * bar's wording ("On GPU", and "No GPU" for an unplaced kernel).
 */
export function placeText(
  session: ISession,
  trans: Trans,
  status = false
): string {
  switch (session.device) {
    case 'gpu':
      return status ? trans.__('On GPU') : trans.__('on GPU');
    case 'cpu':
      return status ? trans.__('On CPU') : trans.__('on CPU');
    default:
      return status ? trans.__('No GPU') : '';
  }
}

/**
 * The file name of a path: it keeps a toast short.
 */
export function fileName(path: string): string {
  return path.split('/').pop() || path;
}

/**
 * A server message as a sentence: capital first letter, final full stop.
 */
export function sentence(message: string): string {
  const text = message.trim();
  if (!text) {
    return '';
  }
  const capital = text.charAt(0).toUpperCase() + text.slice(1);
  return /[.!?]$/.test(capital) ? capital : `${capital}.`;
}

/**
 * The error of a session as a sentence, with what is safe when known.
 */
export function errorText(
  error: ISessionError | string | null,
  trans: Trans
): string {
  if (!error) {
    return '';
  }
  if (typeof error === 'string') {
    return error;
  }
  let text = sentence(error.message);
  if (error.state_intact === true && !/intact|still running/i.test(text)) {
    text += ' ' + trans.__('Your state is intact.');
  } else if (error.state_intact === false) {
    text += ' ' + trans.__('Some of your state may be lost.');
  }
  return text;
}

/**
 * The one-line status of a session for the status bar:
 * "GPU 0 · 14.2 GiB · idle 12 min", "Paused · 6.1 GB", "Waiting for GPU · #2",
 * "Suspended · writing checkpoint 42%", "Suspended · kept until 14:05".
 */
export function statusText(
  session: ISession,
  trans: Trans,
  now: number = Date.now()
): string {
  const parts: string[] = [];
  switch (session.state) {
    case 'active':
    case 'idle': {
      parts.push(gpuText(session, trans) || placeText(session, trans, true));
      const rebuilding = rebuildingText(session, trans);
      if (rebuilding) {
        // The kernel runs, busy re-running cells: that is the news.
        parts.push(rebuilding);
        break;
      }
      if (session.state === 'idle' && session.idle_seconds !== null) {
        parts.push(
          trans.__('idle %1', durationText(session.idle_seconds, trans))
        );
      } else {
        parts.push(stateLabel(session.state, trans));
      }
      const left = secondsUntil(session.pause_at, now);
      if (left !== null) {
        parts.push(trans.__('pauses in %1', countdownText(left)));
      }
      break;
    }
    case 'pausing':
    case 'restoring': {
      const ratio = progressRatio(session);
      const verb =
        session.state === 'pausing'
          ? trans.__('Pausing')
          : trans.__('Restoring');
      parts.push(
        ratio === null ? `${verb}…` : `${verb} ${Math.round(ratio * 100)}%`
      );
      break;
    }
    case 'suspended':
      parts.push(trans.__('Suspended'));
      parts.push(suspendedNote(session, trans, now));
      break;
    case 'paused':
      parts.push(trans.__('Paused'));
      if (session.checkpoint) {
        parts.push(bytesText(session.checkpoint.bytes));
      }
      break;
    case 'waiting':
      parts.push(waitingLabel(session, trans));
      break;
    case 'failed':
      parts.push(
        isCapacityTimeout(session)
          ? trans.__('No GPU became free')
          : trans.__('Pause/resume failed')
      );
      break;
    default:
      parts.push(String(session.state));
  }
  return parts.filter(Boolean).join(' · ');
}

/**
 * Where a suspended session's checkpoint stands, in a few words: "writing
 * checkpoint 42%", "kept until 14:05" (then shut down, the checkpoint
 * written), "checkpoint not written"; '' for a phase this client does not
 * know.
 */
export function suspendedNote(
  session: ISession,
  trans: Trans,
  now: number
): string {
  switch (suspendPhase(session)) {
    case 'writing': {
      const ratio = progressRatio(session);
      return ratio === null
        ? trans.__('writing checkpoint…')
        : trans.__('writing checkpoint %1%', Math.round(ratio * 100));
    }
    case 'written': {
      const until = clockText(session.suspended?.kept_until, trans, now);
      return until
        ? trans.__('kept until %1', until)
        : trans.__('checkpoint saved');
    }
    case 'failed':
      return trans.__('checkpoint not written');
    default:
      return '';
  }
}

/**
 * The short label of a waiting session, for the toolbar and the status
 * bar: "Waiting for GPU · #2", or "Waiting for GPU" without a position.
 */
export function waitingLabel(session: ISession, trans: Trans): string {
  const position = session.queue_position;
  return typeof position === 'number'
    ? trans.__('Waiting for GPU · #%1', position)
    : trans.__('Waiting for GPU');
}

/**
 * Seconds a waiting session has waited so far, counted from
 * `waiting.since`; `null` when the server gave no start.
 */
export function waitedSeconds(session: ISession, now: number): number | null {
  const left = secondsUntil(session.waiting?.since ?? null, now);
  return left === null ? null : Math.max(0, -left);
}

/**
 * Where a waiting session stands: "#2 in line · waiting 3 min". Never an
 * ETA: the queue cannot know when others release their GPUs, and a wrong
 * promise is worse than none.
 */
export function queueText(
  session: ISession,
  trans: Trans,
  now: number
): string {
  const parts: string[] = [];
  if (typeof session.queue_position === 'number') {
    parts.push(trans.__('#%1 in line', session.queue_position));
  }
  const waited = waitedSeconds(session, now);
  if (waited !== null) {
    parts.push(trans.__('waiting %1', durationText(waited, trans)));
  }
  return parts.join(' · ');
}

/**
 * Why a resume waits, in words, for when the server sent no message of its
 * own (it normally does, with the numbers: show that one as is).
 */
export function waitReasonText(session: ISession, trans: Trans): string {
  switch (session.waiting?.reason) {
    case 'queue':
      return trans.__('Waiting for a GPU: others are ahead in line');
    case 'quota-sessions':
      return trans.__(
        'Waiting for a GPU: the limit of GPU sessions on this machine is in use'
      );
    case 'quota-bytes':
      return trans.__(
        'Waiting for a GPU: the GPU-memory limit on this machine is in use'
      );
    case 'gpu-memory':
      return trans.__('Waiting for a GPU: no GPU has enough free memory');
    case 'gpu-oom':
      return trans.__(
        'Waiting for a GPU: the GPU filled up during the restore, so the resume is back in line'
      );
    default:
      return trans.__('Waiting for a GPU');
  }
}

/**
 * Age of an ISO time relative to `now`: "5 min ago".
 */
export function ageText(iso: string, trans: Trans, now: number): string {
  const seconds = -(secondsUntil(iso, now) ?? 0);
  return trans.__('%1 ago', durationText(seconds, trans));
}

/**
 * A stand-in translation bundle that only fills in `%1`-style arguments.
 */
export const untranslated: Trans = {
  __: (msgid: string, ...args: any[]) =>
    msgid.replace(/%(\d+)/g, (match, index) =>
      String(args[Number(index) - 1] ?? match)
    )
};
