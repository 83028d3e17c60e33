/**
 * Opening a paused notebook starts no kernel. JupyterLab starts one for
 * every notebook it opens; for a paused notebook that kernel would only wait
 * for the resume, so the notebook opens without one, saying it is paused,
 * and offers "Resume" (a kernel starts and the saved variables are restored
 * into it) or "Start a new kernel".
 *
 * How: a notebook widget's kernel preference is read by its session context
 * only once the file is loaded and the running sessions are listed, after
 * the widget is created. When the widget is created, the gate turns
 * `shouldStart` off and asks the server whether the notebook is paused;
 * unless it is, the preference is put back and, should the context have
 * decided meanwhile, the kernel is started as JupyterLab would have started
 * it. Any doubt (no answer in time, an error, no server extension) starts
 * the kernel.
 */
import { ISessionContext, Notification } from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';
import type { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';

import type { GpuPauseAPI } from '../api';
import { fileName } from '../format';
import { notebookPath } from '../target';
import { CommandIDs, ISession } from '../tokens';

/**
 * How long a notebook's kernel start waits for the server's answer, in
 * milliseconds; then it starts as usual.
 */
const ANSWER_MS = 5000;

/**
 * Construction options of {@link KernelGate}.
 */
export interface IKernelGateOptions {
  /** The REST client. */
  api: Pick<GpuPauseAPI, 'listSessions'>;
  /** Runs "Resume" from the notification. */
  commands: CommandRegistry;
  /** JupyterLab's kernel selection dialog, for a notebook with no kernelspec. */
  dialogs: ISessionContext.IDialogs | null;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
}

/**
 * Whether a session is a paused notebook waiting to be resumed. A suspended
 * one is not: its kernel lives on with every variable, and the notebook
 * connects to it as to any running kernel.
 */
export function awaitsResume(session: ISession): boolean {
  return (
    session.state === 'paused' ||
    (session.state === 'failed' && session.checkpoint !== null)
  );
}

/**
 * Holds the kernel start of notebooks that are paused.
 */
export class KernelGate {
  constructor(options: IKernelGateOptions) {
    this._options = options;
  }

  /**
   * Hold the kernel start of a notebook widget just created (before its
   * context initializes) until the server says whether it is paused.
   */
  hold(panel: NotebookPanel): void {
    const context = panel.sessionContext;
    const wanted = context.kernelPreference;
    if (
      context.isReady ||
      context.session ||
      wanted.shouldStart === false ||
      wanted.canStart === false
    ) {
      return; // an open notebook's other view, or one that starts no kernel
    }
    context.kernelPreference = { ...wanted, shouldStart: false };
    void this._decide(panel);
  }

  /**
   * The notebook open at `path` that the gate keeps without a kernel.
   */
  heldAt(path: string): NotebookPanel | null {
    for (const panel of this._held) {
      if (!panel.isDisposed && notebookPath(panel) === path) {
        return panel;
      }
    }
    return null;
  }

  /**
   * Let a held notebook start its kernel, as JupyterLab would have.
   * Resolves once it has one (or the user chose none).
   */
  async release(panel: NotebookPanel): Promise<void> {
    this._unhold(panel);
    const context = panel.sessionContext;
    context.kernelPreference = {
      ...context.kernelPreference,
      shouldStart: true
    };
    // The context either starts the kernel now, or decided while held.
    await context.ready;
    if (!panel.isDisposed && !context.session?.kernel) {
      const needsSelection = await context.startKernel();
      if (needsSelection && this._options.dialogs) {
        await this._options.dialogs.selectKernel(context);
      }
    }
    await this._followRename(panel);
  }

  /**
   * Move the notebook's Jupyter session to the notebook's current path and
   * name. JupyterLab moves a session when its notebook is renamed only if the
   * session exists; one started later keeps the first name. A new notebook
   * is named at once, often while its kernel start is held here.
   */
  private async _followRename(panel: NotebookPanel): Promise<void> {
    const session = panel.sessionContext.session;
    if (panel.isDisposed || !session) {
      return;
    }
    const path = panel.context.path;
    if (session.path !== path) {
      await session.setPath(path);
    }
    const name = fileName(panel.context.localPath);
    if (session.name !== name) {
      await session.setName(name);
    }
  }

  private async _decide(panel: NotebookPanel): Promise<void> {
    const path = notebookPath(panel);
    const paused = await Promise.race([
      this._options.api
        .listSessions({ path })
        .then(sessions =>
          sessions.some(s => s.path === path && awaitsResume(s))
        )
        .catch(() => false),
      new Promise<boolean>(resolve =>
        setTimeout(() => resolve(false), ANSWER_MS)
      )
    ]);
    if (panel.isDisposed) {
      return;
    }
    if (!paused) {
      await this.release(panel);
      return;
    }
    this._held.add(panel);
    // A kernel the user picks (the toolbar's kernel name) ends the hold.
    panel.sessionContext.sessionChanged.connect(this._onSession, this);
    this._announce(panel, path);
  }

  private _onSession(context: ISessionContext): void {
    for (const panel of this._held) {
      if (panel.sessionContext === context && context.session) {
        this._unhold(panel);
        context.kernelPreference = {
          ...context.kernelPreference,
          shouldStart: true
        };
      }
    }
  }

  /**
   * The notebook is held no longer: its notification has had its day.
   */
  private _unhold(panel: NotebookPanel): void {
    this._held.delete(panel);
    const toast = this._toasts.get(panel);
    if (toast) {
      this._toasts.delete(panel);
      Notification.dismiss(toast);
    }
  }

  private _announce(panel: NotebookPanel, path: string): void {
    const { commands, trans } = this._options;
    const toast = Notification.info(
      trans.__(
        '%1 is paused, so no kernel was started. Resume brings its variables back.',
        fileName(path)
      ),
      {
        autoClose: false,
        actions: [
          {
            label: trans.__('Resume'),
            caption: trans.__(
              'Start a kernel and restore the saved variables into it'
            ),
            callback: () => {
              void commands.execute(CommandIDs.resume, { path });
            }
          },
          {
            label: trans.__('Start a new kernel'),
            caption: trans.__(
              'Start an empty kernel; the saved variables stay paused'
            ),
            callback: () => {
              void this.release(panel);
            }
          }
        ]
      }
    );
    this._toasts.set(panel, toast);
  }

  private _held = new Set<NotebookPanel>();
  private _toasts = new Map<NotebookPanel, string>();
  private _options: IKernelGateOptions;
}
