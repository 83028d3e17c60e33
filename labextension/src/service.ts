/**
 * The core plugin's service: the REST client, the one sessions model, and
 * the user's settings with a change signal, shared by the other plugins.
 *
 * Its token is declared here, beside the client and the model it names,
 * rather than in `tokens.ts`: that module stays a leaf the client and the
 * model themselves import, so naming them there would close a circle.
 */
import { Token } from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';

import { GpuPauseAPI } from './api';
import type { Emissions } from './eventbus';
import { SessionsModel } from './model';
import { DEFAULT_SETTINGS, IGpuPauseSettings } from './tokens';

/**
 * What the core plugin shares with the panel and notebook plugins.
 */
export interface IGpuPause {
  /** The REST client. */
  readonly api: GpuPauseAPI;
  /** Every tracked session, polled once for all views. */
  readonly model: SessionsModel;
  /** The user's settings in force. */
  readonly settings: Readonly<IGpuPauseSettings>;
  /** Emitted when the settings change. */
  readonly settingsChanged: ISignal<IGpuPause, void>;
}

/**
 * The token of the core plugin's service.
 */
export const IGpuPause = new Token<IGpuPause>(
  'jupyter-gpu-pause:IGpuPause',
  'The sessions model and REST client of jupyter-gpu-pause.'
);

/**
 * The implementation of {@link IGpuPause}.
 */
export class GpuPauseService implements IGpuPause {
  /**
   * @param api - the REST client.
   * @param events - jupyter_server's event stream, for updates as they
   *   happen; without it the model only polls.
   * @param jupyterSessions - Jupyter's session list changed (a notebook
   *   renamed, opened or closed): the model refetches soon after.
   */
  constructor(
    readonly api: GpuPauseAPI,
    events?: Emissions,
    jupyterSessions?: ISignal<unknown, unknown>
  ) {
    this.model = new SessionsModel({
      api,
      refreshInterval: DEFAULT_SETTINGS.refreshInterval,
      events,
      jupyterSessions
    });
  }

  /**
   * Every tracked session.
   */
  readonly model: SessionsModel;

  /**
   * The settings in force (the schema's defaults until the registry loads).
   */
  get settings(): Readonly<IGpuPauseSettings> {
    return this._settings;
  }

  /**
   * Emitted when the settings change.
   */
  get settingsChanged(): ISignal<this, void> {
    return this._settingsChanged;
  }

  /**
   * Take the user's settings (missing keys fall back to the defaults).
   */
  applySettings(settings: Partial<IGpuPauseSettings>): void {
    this._settings = { ...DEFAULT_SETTINGS, ...settings };
    this.model.refreshInterval = this._settings.refreshInterval;
    this._settingsChanged.emit();
  }

  private _settings: IGpuPauseSettings = { ...DEFAULT_SETTINGS };
  private _settingsChanged = new Signal<this, void>(this);
}
