/**
 * The pause and resume commands, acting on the current notebook's session.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import type { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { DisposableSet, IDisposable } from '@lumino/disposable';

import { GpuPauseAPI, GpuPauseError } from './api';
import { SessionModel } from './model';
import {
  CommandIDs,
  IGpuPauseSettings,
  IResumeOptions,
  ISession,
  SessionState
} from './tokens';

/**
 * What the commands need.
 */
export interface ICommandsOptions {
  /** The API client. */
  api: GpuPauseAPI;
  /** The application's command registry. */
  commands: CommandRegistry;
  /** The model of the current notebook's session. */
  model: SessionModel;
  /** The settings in force; read at each run. */
  settings: () => Readonly<IGpuPauseSettings>;
  /** The notebook tracker; commands act on its current widget. */
  tracker: INotebookTracker;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
}

/**
 * States from which a pause may start.
 */
const PAUSABLE: ReadonlyArray<SessionState> = ['active', 'idle'];

/**
 * States from which a resume may start.
 */
const RESUMABLE: ReadonlyArray<SessionState> = ['paused', 'failed'];

/**
 * Register the pause and resume commands; dispose the result to remove them.
 */
export function addCommands(options: ICommandsOptions): IDisposable {
  const { api, commands, model, tracker, trans } = options;

  /**
   * Whether the current notebook's known state allows an action. An unknown
   * state allows it: the server has the last word and explains a refusal.
   */
  const allows = (states: ReadonlyArray<SessionState>): boolean => {
    const panel = tracker.currentWidget;
    if (!panel) {
      return false;
    }
    const session = model.session;
    if (!session || model.path !== Private.pathOf(panel)) {
      return true;
    }
    return states.includes(session.state);
  };

  /**
   * Run one action on the current notebook's session, reporting failures.
   */
  const run = async (
    action: (panel: NotebookPanel, session: ISession) => Promise<void>
  ): Promise<void> => {
    const panel = tracker.currentWidget;
    if (!panel) {
      return;
    }
    const path = Private.pathOf(panel);
    try {
      const sessions = await api.listSessions({ path });
      const session = sessions.find(s => s.path === path);
      if (!session) {
        Notification.warning(
          trans.__('No GPU pause session is tracked for %1.', path),
          { autoClose: 5000 }
        );
        return;
      }
      await action(panel, session);
    } catch (error) {
      Notification.error(Private.messageOf(error, trans), { autoClose: false });
    } finally {
      void model.refresh();
    }
  };

  const disposables = new DisposableSet();

  disposables.add(
    commands.addCommand(CommandIDs.pause, {
      label: trans.__('Pause Kernel and Release GPU'),
      caption: trans.__(
        "Save the current notebook's kernel state to storage and shut the kernel down"
      ),
      describedBy: { args: Private.NO_ARGS },
      isEnabled: () => allows(PAUSABLE),
      execute: () =>
        run(async (panel, session) => {
          if (options.settings().confirmBeforePause) {
            const result = await showDialog({
              title: trans.__('Pause kernel?'),
              body: trans.__(
                'The kernel of %1 will be saved to storage and shut down, releasing its GPU. Resume it later to get its variables back.',
                session.path
              ),
              buttons: [
                Dialog.cancelButton({ label: trans.__('Cancel') }),
                Dialog.okButton({ label: trans.__('Pause') })
              ]
            });
            if (!result.button.accept) {
              return;
            }
          }
          const updated = await api.pause(session.id);
          Notification.info(
            updated.message ??
              trans.__('Pausing the kernel of %1…', updated.path),
            { autoClose: 5000 }
          );
        })
    })
  );

  disposables.add(
    commands.addCommand(CommandIDs.resume, {
      label: trans.__('Resume Paused Kernel'),
      caption: trans.__(
        "Restore the current notebook's paused kernel with its state"
      ),
      describedBy: { args: Private.NO_ARGS },
      isEnabled: () => allows(RESUMABLE),
      execute: () =>
        run(async (panel, session) => {
          const options: IResumeOptions = {};
          const kernel = panel.sessionContext.session?.kernel;
          const kernelId =
            kernel && kernel.connectionStatus === 'connected'
              ? kernel.id
              : null;
          if (kernelId && kernelId !== session.kernel_id) {
            // The notebook got a new kernel while paused: never overwrite its
            // variables without asking.
            const result = await showDialog({
              title: trans.__('Restore into the running kernel?'),
              body: trans.__(
                '%1 has a new kernel since it was paused. Restoring replaces the variables of that kernel with the saved ones.',
                session.path
              ),
              buttons: [
                Dialog.cancelButton({ label: trans.__('Cancel') }),
                Dialog.warnButton({ label: trans.__('Restore') })
              ]
            });
            if (!result.button.accept) {
              return;
            }
            options.into_kernel = kernelId;
          }
          const updated = await api.resume(session.id, options);
          Notification.info(
            updated.message ??
              trans.__('Resuming the kernel of %1…', updated.path),
            { autoClose: 5000 }
          );
        })
    })
  );

  return disposables;
}

/**
 * Module-private helpers.
 */
namespace Private {
  /**
   * Argument schema of commands that take none: they act on the current
   * notebook.
   */
  export const NO_ARGS = {
    type: 'object' as const,
    properties: {},
    additionalProperties: false
  };

  /**
   * The server path of a notebook: the one its Jupyter session uses.
   */
  export function pathOf(panel: NotebookPanel): string {
    return panel.sessionContext.path || panel.context.localPath;
  }

  /**
   * A message for the user: the server's own sentence when it gave one.
   */
  export function messageOf(error: unknown, trans: TranslationBundle): string {
    if (error instanceof GpuPauseError) {
      return error.message;
    }
    return trans.__('Unexpected error: %1', String(error));
  }
}
