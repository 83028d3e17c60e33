/**
 * The commands of the sessions panel: show it, and refresh the list it
 * shows now rather than at the next poll.
 */
import type { TranslationBundle } from '@jupyterlab/translation';
import { DisposableSet, IDisposable } from '@lumino/disposable';

import type { SessionsModel } from '../model';
import { CommandIDs, ICommandsHost } from '../tokens';

/**
 * What the panel commands need.
 */
export interface IPanelCommandsDeps {
  /** Every tracked session, refreshed on demand. */
  model: Pick<SessionsModel, 'refresh'>;
  /** Show the sessions panel. */
  openPanel: () => void;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
}

/**
 * Argument schema of commands that take none.
 */
const NO_ARGS = {
  type: 'object' as const,
  properties: {},
  additionalProperties: false
};

/**
 * Register the panel commands; dispose the result to remove them.
 */
export function addPanelCommands(
  app: ICommandsHost,
  deps: IPanelCommandsDeps
): IDisposable {
  const { model, openPanel, trans } = deps;
  const disposables = new DisposableSet();
  disposables.add(
    app.commands.addCommand(CommandIDs.openPanel, {
      label: trans.__('Show GPU Sessions'),
      caption: trans.__('Open the panel that lists every GPU session'),
      describedBy: { args: NO_ARGS },
      execute: () => openPanel()
    })
  );
  disposables.add(
    app.commands.addCommand(CommandIDs.refresh, {
      label: trans.__('Refresh GPU Sessions'),
      caption: trans.__('Ask the server for the sessions now'),
      describedBy: { args: NO_ARGS },
      execute: () => model.refresh()
    })
  );
  return disposables;
}
