/**
 * The state of the current notebook's session, kept fresh by polling.
 */
import { IDisposable } from '@lumino/disposable';
import { IPoll, Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { GpuPauseAPI, GpuPauseError } from './api';
import { ISession } from './tokens';

/**
 * Longest wait between two polls after repeated failures, in milliseconds.
 */
const MAX_BACKOFF_MS = 5 * 60 * 1000;

/**
 * Construction options of {@link SessionModel}.
 */
export interface ISessionModelOptions {
  /** The API client. */
  api: GpuPauseAPI;
  /** Seconds between two refreshes. */
  refreshInterval: number;
}

/**
 * Tracks the jupyter_gpu_pause session of one notebook path.
 *
 * It polls the server while the page is visible, backs off on errors and
 * stops for good when the server extension is missing. It touches no DOM.
 */
export class SessionModel implements IDisposable {
  constructor(options: ISessionModelOptions) {
    this._api = options.api;
    this._poll = new Poll({
      auto: false,
      factory: () => this._fetch(),
      frequency: Private.frequency(options.refreshInterval),
      name: 'jupyter-gpu-pause:session',
      standby: 'when-hidden'
    });
  }

  /**
   * Emitted when the path, the session or its availability changes.
   */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /**
   * Whether the model has been disposed.
   */
  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /**
   * The tracked notebook path; `null` when no notebook is current.
   */
  get path(): string | null {
    return this._path;
  }
  set path(path: string | null) {
    if (path === this._path) {
      return;
    }
    this._path = path;
    this._setSession(null);
    void this.refresh();
  }

  /**
   * The session of {@link path}, or `null` when none is tracked.
   */
  get session(): ISession | null {
    return this._session;
  }

  /**
   * Whether the server extension answers. `false` stops polling.
   */
  get available(): boolean {
    return this._available;
  }

  /**
   * Seconds between two refreshes.
   */
  set refreshInterval(seconds: number) {
    this._poll.frequency = Private.frequency(seconds);
  }

  /**
   * Start polling.
   */
  start(): void {
    if (this._available && !this.isDisposed) {
      this._started = true;
      void this._poll.start();
    }
  }

  /**
   * Refresh now, e.g. after a command changed the session's state; does
   * nothing before {@link start}.
   */
  async refresh(): Promise<void> {
    if (this._started && this._available && !this.isDisposed) {
      await this._poll.refresh();
    }
  }

  /**
   * Stop polling and release resources.
   */
  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    Signal.clearData(this);
  }

  private async _fetch(): Promise<void> {
    const path = this._path;
    if (!path) {
      this._setSession(null);
      return;
    }
    try {
      const sessions = await this._api.listSessions({ path });
      if (path === this._path) {
        this._setSession(sessions.find(s => s.path === path) ?? null);
      }
    } catch (error) {
      if (error instanceof GpuPauseError && error.serverExtensionMissing) {
        this._available = false;
        this._setSession(null);
        void this._poll.stop();
        return;
      }
      // Let the poll back off; the last known session stays shown.
      throw error;
    }
  }

  private _setSession(session: ISession | null): void {
    if (JSON.stringify(session) === JSON.stringify(this._session)) {
      return;
    }
    this._session = session;
    this._changed.emit();
  }

  private _api: GpuPauseAPI;
  private _available = true;
  private _changed = new Signal<this, void>(this);
  private _path: string | null = null;
  private _poll: Poll;
  private _session: ISession | null = null;
  private _started = false;
}

/**
 * Module-private helpers.
 */
namespace Private {
  /**
   * Poll frequency for a refresh interval in seconds (at least one second).
   */
  export function frequency(seconds: number): IPoll.Frequency {
    const interval = Math.max(1, seconds) * 1000;
    return { interval, backoff: true, max: Math.max(interval, MAX_BACKOFF_MS) };
  }
}
