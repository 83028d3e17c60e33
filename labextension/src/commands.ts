/**
 * Every command of the extension, registered feature by feature: a
 * session's lifecycle (`session/`), the rebuild of what a resume left
 * behind (`rebuild/`) and the sessions panel (`panel/`). Each feature gets
 * only the dependencies it declares.
 */
import type { INotebookTracker } from '@jupyterlab/notebook';
import type { TranslationBundle } from '@jupyterlab/translation';
import { DisposableSet, IDisposable } from '@lumino/disposable';

import type { GpuPauseAPI } from './api';
import type { SessionsModel } from './model';
import { addPanelCommands } from './panel/commands';
import { addRebuildCommands } from './rebuild/commands';
import { addSessionCommands } from './session/commands';
import type { KernelGate } from './session/gate';
import { ICommandsHost, IGpuPauseSettings } from './tokens';

/**
 * What the commands of every feature need together.
 */
export interface ICommandsDeps {
  /** The API client. */
  api: GpuPauseAPI;
  /** Every tracked session. */
  model: SessionsModel;
  /** The settings in force; read at each run. */
  settings: () => Readonly<IGpuPauseSettings>;
  /** The notebook tracker, when notebooks are available. */
  tracker: INotebookTracker | null;
  /** What keeps paused notebooks from starting a kernel, when it runs. */
  gate?: KernelGate | null;
  /** Show the sessions panel. */
  openPanel: () => void;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
}

/**
 * Register every command; dispose the result to remove them.
 */
export function addCommands(
  app: ICommandsHost,
  deps: ICommandsDeps
): IDisposable {
  const { api, model, tracker, trans } = deps;
  const disposables = new DisposableSet();
  disposables.add(
    addSessionCommands(app, {
      api,
      model,
      settings: deps.settings,
      tracker,
      gate: deps.gate ?? null,
      trans
    })
  );
  disposables.add(addRebuildCommands(app, { api, model, tracker, trans }));
  disposables.add(
    addPanelCommands(app, { model, openPanel: deps.openPanel, trans })
  );
  return disposables;
}
