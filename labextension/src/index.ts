/**
 * jupyter-gpu-pause: pause a notebook's kernel to storage, releasing its GPU,
 * and resume it with its state. This module only wires the plugin.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, Notification } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITranslator } from '@jupyterlab/translation';

import { GpuPauseAPI } from './api';
import { addCommands } from './commands';
import { SessionModel } from './model';
import {
  CommandIDs,
  DEFAULT_SETTINGS,
  IGpuPauseSettings,
  PLUGIN_ID,
  TRANSLATION_DOMAIN
} from './tokens';
import { GpuPauseStatus } from './widgets/statusbar';

/**
 * The main plugin: pause/resume commands, the status bar item, and a warning
 * when the server extension is missing.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'Pause and resume notebook kernels with their state, releasing idle GPUs.',
  autoStart: true,
  requires: [ITranslator],
  optional: [ICommandPalette, INotebookTracker, ISettingRegistry, IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    translator: ITranslator,
    palette: ICommandPalette | null,
    tracker: INotebookTracker | null,
    settingRegistry: ISettingRegistry | null,
    statusBar: IStatusBar | null
  ): void => {
    const trans = translator.load(TRANSLATION_DOMAIN);
    const api = new GpuPauseAPI({
      serverSettings: app.serviceManager.serverSettings,
      trans
    });
    const settings: IGpuPauseSettings = { ...DEFAULT_SETTINGS };
    const model = new SessionModel({
      api,
      refreshInterval: settings.refreshInterval
    });
    const status = new GpuPauseStatus({ model, commands: app.commands, trans });

    if (tracker) {
      addCommands({
        api,
        commands: app.commands,
        model,
        settings: () => settings,
        tracker,
        trans
      });
      const follow = (): void => {
        const panel = tracker.currentWidget;
        model.path = panel
          ? panel.sessionContext.path || panel.context.localPath
          : null;
      };
      tracker.currentChanged.connect(follow);
      model.changed.connect(() => {
        app.commands.notifyCommandChanged(CommandIDs.pause);
        app.commands.notifyCommandChanged(CommandIDs.resume);
      });
      follow();

      if (palette) {
        const category = trans.__('GPU Pause');
        palette.addItem({ command: CommandIDs.pause, category });
        palette.addItem({ command: CommandIDs.resume, category });
      }
      if (statusBar) {
        statusBar.registerStatusItem('jupyter-gpu-pause:status', {
          item: status,
          align: 'left',
          rank: 4,
          isActive: () => status.isActive(),
          activeStateChanged: status.activeStateChanged
        });
      }
    }

    if (settingRegistry) {
      const apply = (loaded: ISettingRegistry.ISettings): void => {
        const composite = loaded.composite as Partial<IGpuPauseSettings>;
        Object.assign(settings, DEFAULT_SETTINGS, composite);
        model.refreshInterval = settings.refreshInterval;
        status.enabled = settings.showStatusBar;
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

    // Probe the server extension once: without it nothing here can work.
    api
      .isServerExtensionEnabled()
      .then(enabled => {
        if (enabled) {
          model.start();
          return;
        }
        Notification.warning(
          trans.__(
            'The jupyter_gpu_pause server extension is not enabled: pause/resume will not work. Enable it with "jupyter server extension enable jupyter_gpu_pause" and restart the server.'
          ),
          { autoClose: false }
        );
      })
      .catch(reason => {
        console.warn('jupyter-gpu-pause: the server probe failed.', reason);
        model.start();
      });
  }
};

export default plugin;
