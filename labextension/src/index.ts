/**
 * jupyter-gpu-pause: pause a notebook's kernel to storage, releasing its GPU,
 * and resume it with its state. This module only wires the plugins.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  ISessionContext,
  ISessionContextDialogs,
  Notification
} from '@jupyterlab/apputils';
import { DocumentRegistry } from '@jupyterlab/docregistry';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITranslator } from '@jupyterlab/translation';
import { DisposableDelegate } from '@lumino/disposable';

import { GpuPauseAPI } from './api';
import { BudgetNotifier } from './budget/notify';
import { addCommands } from './commands';
import { gpuPauseIcon } from './icons';
import { RebuildNotifier } from './rebuild/notify';
import { GpuPauseService, IGpuPause } from './service';
import { KernelGate } from './session/gate';
import { OnBehalfNotifier } from './onbehalf/notify';
import { EventNotifier } from './session/notify';
import { notebookPath } from './target';
import {
  CommandIDs,
  IGpuPauseSettings,
  PANEL_ID,
  PLUGIN_ID,
  TRANSLATION_DOMAIN
} from './tokens';
import { UnpausableNotifier } from './unpausable/notify';
import { BudgetLine } from './widgets/budget';
import { GpuHoursChart } from './widgets/chart';
import { SessionsPanel } from './widgets/panel';
import { PauseTierLine } from './widgets/tier';
import { GpuPauseStatus } from './widgets/statusbar';
import { NotebookStateButton } from './widgets/toolbar';

/**
 * The core: one sessions model for every view, the commands, the
 * notifications, the settings, and a warning when the server extension is
 * missing.
 */
const core: JupyterFrontEndPlugin<IGpuPause> = {
  id: PLUGIN_ID,
  description:
    'Pause and resume notebook kernels with their state, releasing idle GPUs.',
  autoStart: true,
  provides: IGpuPause,
  requires: [ITranslator],
  optional: [INotebookTracker, ISettingRegistry, ISessionContextDialogs],
  activate: (
    app: JupyterFrontEnd,
    translator: ITranslator,
    tracker: INotebookTracker | null,
    settingRegistry: ISettingRegistry | null,
    dialogs: ISessionContext.IDialogs | null
  ): IGpuPause => {
    const trans = translator.load(TRANSLATION_DOMAIN);
    const api = new GpuPauseAPI({
      serverSettings: app.serviceManager.serverSettings,
      trans
    });
    const service = new GpuPauseService(
      api,
      app.serviceManager.events.stream,
      app.serviceManager.sessions.runningChanged
    );
    const { model } = service;

    // Opening a paused notebook starts no kernel until Resume (session/gate.ts)
    const gate = tracker
      ? new KernelGate({ api, commands: app.commands, dialogs, trans })
      : null;
    if (gate) {
      app.docRegistry.addWidgetExtension('Notebook', {
        createNew: (nb: NotebookPanel) => gate.hold(nb)
      });
    }

    addCommands(app, {
      api,
      gate,
      model,
      settings: () => service.settings,
      tracker,
      openPanel: () => app.shell.activateById(PANEL_ID),
      trans
    });
    new EventNotifier({
      model,
      commands: app.commands,
      tracker,
      sessions: app.serviceManager.sessions,
      trans
    });
    // After the resume's own toast: what it did not bring back, and the plan.
    new RebuildNotifier({ model, commands: app.commands, trans });
    new BudgetNotifier({ model, trans });
    // Once per session whose kernel cannot be paused.
    new UnpausableNotifier({ model, trans });
    // What an admin paused or cancelled on the user's behalf, and why.
    new OnBehalfNotifier({ model, commands: app.commands, trans });

    if (settingRegistry) {
      const apply = (loaded: ISettingRegistry.ISettings): void => {
        service.applySettings(loaded.composite as Partial<IGpuPauseSettings>);
      };
      settingRegistry
        .load(PLUGIN_ID)
        .then(loaded => {
          apply(loaded);
          loaded.changed.connect(apply);
        })
        .catch(reason => {
          console.error(`Failed to load settings for ${PLUGIN_ID}.`, reason);
        });
    }

    // Without the server extension nothing here can work: say so once.
    model.changed.connect(function warnOnce(): void {
      if (model.availability === 'unknown') {
        return;
      }
      model.changed.disconnect(warnOnce);
      if (model.availability === 'missing') {
        Notification.warning(
          trans.__(
            'The jupyter_gpu_pause server extension is not enabled: pause/resume will not work. Enable it with "jupyter server extension enable jupyter_gpu_pause" and restart the server.'
          ),
          { autoClose: false }
        );
      }
    });
    void app.restored.then(() => model.start());
    return service;
  }
};

/**
 * The "GPU sessions" sidebar panel.
 */
const panel: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gpu-pause:panel',
  description: 'A sidebar panel listing every GPU session with its actions.',
  autoStart: true,
  requires: [IGpuPause, ITranslator],
  optional: [ILayoutRestorer, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    gpuPause: IGpuPause,
    translator: ITranslator,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ): void => {
    const trans = translator.load(TRANSLATION_DOMAIN);
    const widget = new SessionsPanel({
      model: gpuPause.model,
      chart: new GpuHoursChart(gpuPause.api, trans),
      tier: new PauseTierLine(gpuPause.api, trans),
      budget: new BudgetLine({
        api: gpuPause.api,
        trans,
        user: () => app.serviceManager.user?.identity?.username ?? null
      }),
      refresh: () => void app.commands.execute(CommandIDs.refresh),
      actions: {
        run: (command, sessionId) =>
          void app.commands.execute(command, { sessionId }),
        open: path => void app.commands.execute('docmanager:open', { path })
      },
      trans
    });
    widget.id = PANEL_ID;
    widget.title.icon = gpuPauseIcon;
    app.shell.add(widget, 'left', { rank: 250 });
    restorer?.add(widget, PANEL_ID);
    if (palette) {
      const category = trans.__('GPU Pause');
      for (const command of [
        CommandIDs.openPanel,
        CommandIDs.refresh,
        CommandIDs.pause,
        CommandIDs.resume,
        CommandIDs.resumeCpu,
        CommandIDs.cancel,
        CommandIDs.keepRunning,
        CommandIDs.discard,
        CommandIDs.rebuild
      ]) {
        palette.addItem({ command, category });
      }
    }
  }
};

/**
 * The notebook's own view of its session: a toolbar button and a status bar
 * item.
 */
const notebook: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gpu-pause:notebook',
  description:
    "A notebook toolbar button and a status bar item for the notebook's GPU session.",
  autoStart: true,
  requires: [IGpuPause, ITranslator, INotebookTracker],
  optional: [IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    gpuPause: IGpuPause,
    translator: ITranslator,
    tracker: INotebookTracker,
    statusBar: IStatusBar | null
  ): void => {
    const trans = translator.load(TRANSLATION_DOMAIN);
    const { model } = gpuPause;

    const extension: DocumentRegistry.WidgetExtension = {
      createNew: (nb: NotebookPanel) => {
        const button = new NotebookStateButton({
          panel: nb,
          model,
          commands: app.commands,
          trans
        });
        if (!nb.toolbar.insertAfter('cellType', 'gpuPause', button)) {
          nb.toolbar.addItem('gpuPause', button);
        }
        return new DisposableDelegate(() => button.dispose());
      }
    };
    app.docRegistry.addWidgetExtension('Notebook', extension);

    const status = new GpuPauseStatus({ model, commands: app.commands, trans });
    const follow = (): void => {
      const current = tracker.currentWidget;
      status.path = current ? notebookPath(current) : null;
      app.commands.notifyCommandChanged();
    };
    tracker.currentChanged.connect(follow);
    model.changed.connect(follow);
    follow();
    const applySettings = (): void => {
      status.enabled = gpuPause.settings.showStatusBar;
    };
    gpuPause.settingsChanged.connect(applySettings);
    applySettings();
    statusBar?.registerStatusItem('jupyter-gpu-pause:status', {
      item: status,
      align: 'left',
      rank: 4,
      isActive: () => status.isActive(),
      activeStateChanged: status.activeStateChanged
    });
  }
};

export default [core, panel, notebook];
