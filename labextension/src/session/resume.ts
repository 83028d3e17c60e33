/**
 * A resume from the Lab, with the one question it may need. The server
 * restores into a kernel the notebook opened while paused as long as that
 * kernel has run nothing; once code ran in it, the server refuses
 * (`kernel-exists`) and the user is asked before its variables are
 * overwritten: never without asking. A suspended session comes back in
 * place, in its own kernel.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import type { INotebookTracker } from '@jupyterlab/notebook';
import type { TranslationBundle } from '@jupyterlab/translation';

import { GpuPauseAPI, GpuPauseError, KERNEL_EXISTS } from '../api';
import type { SessionsModel } from '../model';
import { notebookPath } from '../target';
import { IResumeOptions, ISession, ResumeDevice } from '../tokens';
import type { KernelGate } from './gate';

/**
 * What a resume needs.
 */
export interface IResumeDeps {
  /** The API client: the resume, and the kernels the server lists. */
  api: Pick<GpuPauseAPI, 'resume' | 'listSessions'>;
  /** Every tracked session, refreshed before the question. */
  model: Pick<SessionsModel, 'refresh'>;
  /** The open notebooks, to find the kernel the question is about. */
  tracker: INotebookTracker | null;
  /** What keeps paused notebooks from starting a kernel, when it runs. */
  gate: Pick<KernelGate, 'heldAt' | 'release'> | null;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
}

/**
 * Resume a paused, failed or suspended session, on `device` when given.
 * Resolves the updated session, or nothing when the user declined.
 */
export async function resumeSession(
  session: ISession,
  device: ResumeDevice | undefined,
  deps: IResumeDeps
): Promise<ISession | void> {
  const { api, gate, model, tracker, trans } = deps;
  if (session.state === 'suspended') {
    // In place: the same kernel, its CUDA state back on a GPU. No kernel
    // to start and none to ask about.
    return api.resume(session.id, {});
  }
  const options: IResumeOptions = device ? { device } : {};
  // A paused notebook open here without a kernel starts one first, as
  // JupyterLab does: the server restores into it.
  const held = gate?.heldAt(session.path);
  if (held) {
    await gate!.release(held);
  }
  try {
    return await api.resume(session.id, options);
  } catch (error) {
    if (!(error instanceof GpuPauseError) || error.reason !== KERNEL_EXISTS) {
      throw error;
    }
    // The server now lists that kernel as a session of its own: show it
    // behind the question.
    await model.refresh().catch(() => undefined);
    const kernel =
      Private.openKernel(tracker, session.path) ??
      (await Private.runningKernel(api, session));
    if (!kernel) {
      throw error;
    }
    const result = await showDialog({
      title: trans.__('Restore into the running kernel?'),
      body: trans.__(
        '%1 has a new kernel since it was paused, and code was run in it. Restoring replaces the variables of that kernel with the saved ones.',
        session.path
      ),
      buttons: [
        Dialog.cancelButton({ label: trans.__('Cancel') }),
        Dialog.warnButton({ label: trans.__('Restore into it') })
      ]
    });
    if (!result.button.accept) {
      return;
    }
    return api.resume(session.id, { ...options, into_kernel: kernel });
  }
}

/**
 * Module-private helpers.
 */
namespace Private {
  /**
   * The connected kernel of the notebook open at `path`, if any.
   */
  export function openKernel(
    tracker: INotebookTracker | null,
    path: string
  ): string | null {
    const panel = tracker?.find(p => notebookPath(p) === path);
    const kernel = panel?.sessionContext.session?.kernel;
    return kernel && kernel.connectionStatus === 'connected' ? kernel.id : null;
  }

  /**
   * The running kernel of a session's notebook as the server lists it (the
   * notebook may be open in another page), if any.
   */
  export async function runningKernel(
    api: Pick<GpuPauseAPI, 'listSessions'>,
    session: ISession
  ): Promise<string | null> {
    const listed = await api.listSessions({ path: session.path });
    const running = listed.find(
      s =>
        s.id !== session.id &&
        s.path === session.path &&
        s.kernel_id !== null &&
        (s.state === 'active' || s.state === 'idle')
    );
    return running?.kernel_id ?? null;
  }
}
