/**
 * Which actions a session offers in its state, and the facts that decide
 * them, in one place so the panel rows, the notebook toolbar, the status
 * bar, the commands and the notifications always agree. Pure functions: no
 * DOM, no server.
 */
import { CommandIDs, IRebuildPlan, ISession } from './tokens';
import { unpausable } from './unpausable/text';

/**
 * Whether the checkpoint to resume holds GPU tensors, which makes a resume
 * on the CPU a real choice: they come back in CPU memory. A checkpoint
 * without any resumes the same either way, so only the plain Resume is
 * offered.
 */
export function offersCpuResume(session: ISession): boolean {
  return (session.checkpoint?.gpu_bytes ?? 0) > 0;
}

/**
 * Whether a session failed because no GPU became free in time: its
 * checkpoint is intact and a Resume tries again.
 */
export function isCapacityTimeout(session: ISession | null): boolean {
  const error = session?.error;
  return (
    session?.state === 'failed' &&
    typeof error === 'object' &&
    error !== null &&
    error.reason === 'capacity-timeout'
  );
}

/**
 * Where a suspended session stands: its checkpoint being written, written
 * (the kernel kept for a fast resume), or not written (every variable still
 * in the kernel); `unknown` for a word this client does not know.
 */
export type SuspendPhase = 'writing' | 'written' | 'failed' | 'unknown';

/**
 * The phase of a suspended session; `null` for any other state. An error
 * means the write failed, whatever the record says; a record an older or
 * newer server left out is read from the progress.
 */
export function suspendPhase(session: ISession | null): SuspendPhase | null {
  if (session?.state !== 'suspended') {
    return null;
  }
  const checkpoint = session.suspended?.checkpoint;
  if (session.error || checkpoint === 'failed') {
    return 'failed';
  }
  if (checkpoint === 'writing' || checkpoint === 'written') {
    return checkpoint;
  }
  return session.progress ? 'writing' : 'unknown';
}

/**
 * Whether a session's kernel is busy re-running recorded cells (a rebuild):
 * it runs, but cannot be paused until the rebuild ends.
 */
export function isRebuilding(session: ISession | null): boolean {
  const p = session?.progress;
  return (
    (session?.state === 'active' || session?.state === 'idle') &&
    !!p &&
    (p.unit === 'cells' || p.phase === 'rebuilding')
  );
}

/**
 * The rebuild plan a session offers: its last resume left names that
 * re-running recorded cells can make again, and no rebuild runs now;
 * `null` otherwise.
 */
export function rebuildOffer(session: ISession | null): IRebuildPlan | null {
  const plan = session?.restore?.rebuild;
  const running = session?.state === 'active' || session?.state === 'idle';
  if (!running || !plan?.names?.length || isRebuilding(session)) {
    return null;
  }
  return plan;
}

/**
 * The obvious next action on a session, for one-click views (toolbar, status
 * bar): pause a running kernel, resume a paused one or a suspended one (in
 * place, whatever its checkpoint's phase), cancel a pause or a queued
 * resume; `null` when nothing applies (restoring, failed without a
 * checkpoint, running on another server, re-running cells).
 */
export function primaryCommand(session: ISession): string | null {
  if (session.running_elsewhere || isRebuilding(session)) {
    return null; // another server runs it, or it re-runs cells: wait
  }
  switch (session.state) {
    case 'active':
    case 'idle':
      return unpausable(session) ? null : CommandIDs.pause;
    case 'paused':
    case 'suspended':
      return CommandIDs.resume;
    case 'failed':
      return session.checkpoint ? CommandIDs.resume : null;
    case 'pausing':
    case 'waiting':
      return CommandIDs.cancel;
    default:
      return null;
  }
}

/**
 * Every action a session offers, in the order the panel shows them. A
 * waiting resume can always leave the queue for the CPU: the user may
 * prefer a slow kernel now to a fast one later. A resumed kernel that
 * misses variables offers to re-run the cells that make them, first. A
 * suspended kernel offers only Resume: it comes back in place, on a GPU, so
 * neither the CPU nor a discard applies while it lives, and the server
 * refuses a pause.
 */
export function sessionActions(session: ISession): string[] {
  if (session.running_elsewhere) {
    return []; // resumed on another server: nothing to do here until it pauses there
  }
  if (isRebuilding(session)) {
    return []; // the server refuses a pause until the re-run ends
  }
  const resume = offersCpuResume(session)
    ? [CommandIDs.resume, CommandIDs.resumeCpu]
    : [CommandIDs.resume];
  const rebuild = rebuildOffer(session) ? [CommandIDs.rebuild] : [];
  // A kernel that cannot be paused is never offered a pause; a policy that
  // will shut it down can still be postponed.
  const pause = unpausable(session) ? [] : [CommandIDs.pause];
  switch (session.state) {
    case 'active':
      return [...rebuild, ...pause];
    case 'idle':
      return session.pause_at
        ? [...rebuild, ...pause, CommandIDs.keepRunning]
        : [...rebuild, ...pause];
    case 'pausing':
      return [CommandIDs.cancel];
    case 'waiting':
      return [CommandIDs.cancel, CommandIDs.resumeCpu];
    case 'suspended':
      return [CommandIDs.resume];
    case 'paused':
      return [...resume, CommandIDs.discard];
    case 'failed':
      return session.checkpoint
        ? [...resume, CommandIDs.discard]
        : [CommandIDs.discard];
    default:
      return [];
  }
}
