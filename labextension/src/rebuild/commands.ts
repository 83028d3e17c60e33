/**
 * The rebuild command: re-run the recorded cells of the last resume's
 * rebuild plan, so the variables the checkpoint could not hold come back.
 * The notifications, the panel and the palette run it; it takes a session
 * id or a notebook path (else the current notebook), and `confirm` once the
 * user has read what the cells would share.
 */
import { Notification } from '@jupyterlab/apputils';
import type { INotebookTracker } from '@jupyterlab/notebook';
import type { TranslationBundle } from '@jupyterlab/translation';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';
import { IDisposable } from '@lumino/disposable';

import { rebuildOffer } from '../actions';
import { GpuPauseAPI, GpuPauseError } from '../api';
import type { SessionsModel } from '../model';
import { targetSession } from '../target';
import { CommandIDs, ICommandsHost, ISessionCommandArgs } from '../tokens';

/**
 * What the rebuild command needs.
 */
export interface IRebuildCommandsDeps {
  /** The API client. */
  api: Pick<GpuPauseAPI, 'rebuild'>;
  /** Every tracked session. */
  model: Pick<SessionsModel, 'byId' | 'byPath' | 'update' | 'refresh'>;
  /** The notebook tracker, to act on the current notebook. */
  tracker: INotebookTracker | null;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
}

/**
 * Argument schema of the rebuild command.
 */
const REBUILD_ARGS = {
  type: 'object' as const,
  properties: {
    sessionId: { type: 'string', description: 'Session id' },
    path: { type: 'string', description: 'Notebook path' },
    confirm: {
      type: 'boolean',
      description: 'Re-run even though restored objects would be shared'
    }
  },
  additionalProperties: false
};

/**
 * Register the rebuild command; dispose the result to remove it.
 */
export function addRebuildCommands(
  app: ICommandsHost,
  deps: IRebuildCommandsDeps
): IDisposable {
  const { api, model, tracker, trans } = deps;
  /** The session the arguments name, as last polled. */
  const sessionOf = (args: ReadonlyPartialJSONObject) =>
    targetSession(args as ISessionCommandArgs, model, tracker);

  return app.commands.addCommand(CommandIDs.rebuild, {
    label: args =>
      (args as ISessionCommandArgs).confirm
        ? trans.__('Re-run anyway')
        : trans.__('Re-run Cells to Rebuild Missing Variables'),
    caption: trans.__(
      'Re-run the recorded cells that make the variables the last resume did not bring back; what was restored is not changed'
    ),
    describedBy: { args: REBUILD_ARGS },
    isEnabled: args => rebuildOffer(sessionOf(args)) !== null,
    isVisible: args => rebuildOffer(sessionOf(args)) !== null,
    execute: async args => {
      const session = sessionOf(args);
      if (!session) {
        return;
      }
      try {
        const confirm = (args as ISessionCommandArgs).confirm === true;
        model.update(await api.rebuild(session.id, { confirm }));
      } catch (error) {
        const message =
          error instanceof GpuPauseError
            ? error.message
            : trans.__('Unexpected error: %1', String(error));
        Notification.error(trans.__('Rebuild not started: %1', message), {
          autoClose: false
        });
      } finally {
        void model.refresh();
      }
    }
  });
}
