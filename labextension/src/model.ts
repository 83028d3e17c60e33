/**
 * Every tracked session and the lifecycle events, kept fresh by the
 * server's event bus and one poll that the panel, the notebook toolbars,
 * the status bar and the notifications all share. No DOM here.
 */
import { IDisposable } from '@lumino/disposable';
import { IPoll, Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { GpuPauseAPI, GpuPauseError } from './api';
import { Emissions, IBurst, LifecycleEventBus } from './eventbus';
import { IEvent, ISession, SessionState } from './tokens';

/**
 * Longest wait between two polls after repeated failures, in milliseconds.
 */
const MAX_BACKOFF_MS = 5 * 60 * 1000;

/**
 * Poll interval while an operation runs (a rebuild too), so progress moves.
 */
const BUSY_INTERVAL_MS = 1000;

/**
 * Poll interval while the event bus delivers and nothing is in progress or
 * about to happen: the poll is then only a fallback, for what changes
 * without an event (idle time, GPU use) and for events the bus missed.
 */
const QUIET_INTERVAL_MS = 30 * 1000;

/**
 * How long after an event the poll keeps the user's interval. The server
 * may finish what an event announces a moment later: a warning's countdown
 * (`pause_at`) shows at the idle monitor's next pass, after the `warned`
 * event; a new kernel's notebook session is saved after its start event.
 */
const SETTLE_MS = 60 * 1000;

/**
 * How far back the first events request looks; its events are not
 * announced, they only set the cursor.
 */
const FIRST_EVENTS_WINDOW_MS = 24 * 3600 * 1000;

/**
 * States in which something is happening that the user watches.
 */
const TRANSITIONAL: ReadonlyArray<SessionState> = [
  'pausing',
  'waiting',
  'restoring'
];

/**
 * The parts of the API client the model uses.
 */
export type ISessionsAPI = Pick<GpuPauseAPI, 'listSessions' | 'events'>;

/**
 * Construction options of {@link SessionsModel}.
 */
export interface ISessionsModelOptions {
  /** The API client. */
  api: ISessionsAPI;
  /** Seconds between two refreshes when nothing is in progress. */
  refreshInterval: number;
  /**
   * jupyter_server's event stream (`serviceManager.events.stream`): each
   * lifecycle event on it refreshes the model at once. Without it the
   * model only polls.
   */
  events?: Emissions;
  /**
   * Jupyter's own list of sessions changed (`serviceManager.sessions
   * .runningChanged`): a notebook was renamed, opened or closed. The model
   * refetches soon after, so a renamed notebook's row shows its new name at
   * once rather than at the next quiet poll (30 s).
   */
  jupyterSessions?: ISignal<unknown, unknown>;
}

/**
 * How long after Jupyter's session list changed the model refetches: Lab
 * renames a new notebook's session just after its kernel starts, so the
 * changes of one action come together.
 */
export const JUPYTER_SESSIONS_SETTLE_MS = 300;

/**
 * Availability of the server extension: unknown until the first answer.
 */
export type Availability = 'unknown' | 'available' | 'missing';

/**
 * All jupyter_gpu_pause sessions of the server, and the events since the
 * page loaded.
 *
 * It refetches as soon as the server's event bus brings a lifecycle event
 * (one refetch per burst). It also polls while the page is visible: every
 * second while a pause or resume runs or a resume waits (progress and the
 * queue move without events), at the user's interval while a countdown to
 * a pause shows, for a minute after an event, or while the bus is not known
 * to work, and every 30 s otherwise.
 * It backs off on errors and stops for good when the server extension is
 * missing. Signals fire only on real changes, so views do not flicker.
 */
export class SessionsModel implements IDisposable {
  constructor(options: ISessionsModelOptions) {
    this._api = options.api;
    this._interval = Private.toMs(options.refreshInterval);
    this._poll = new Poll({
      auto: false,
      factory: () => this.fetch(),
      frequency: this._frequency(),
      name: 'jupyter-gpu-pause:sessions',
      standby: 'when-hidden'
    });
    if (options.events) {
      this._bus = new LifecycleEventBus({ stream: options.events });
      this._bus.received.connect(this._onBusEvents, this);
      this._bus.liveChanged.connect(this._onLiveChanged, this);
      if (typeof document !== 'undefined') {
        document.addEventListener('visibilitychange', this._onVisibility);
      }
    }
    options.jupyterSessions?.connect(this._onJupyterSessions, this);
  }

  /**
   * Emitted when the sessions, the availability or the last error change.
   */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /**
   * Emitted with the events that happened since the last poll.
   */
  get eventsReceived(): ISignal<this, IEvent[]> {
    return this._eventsReceived;
  }

  /**
   * Emitted every second while some session shows a countdown (`pause_at`)
   * or the time it has waited for a GPU, so views can tick without asking
   * the server.
   */
  get clock(): ISignal<this, void> {
    return this._clock;
  }

  /**
   * Whether the model has been disposed.
   */
  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /**
   * Whether lifecycle events arrive from the server's event bus, so the
   * poll is only a fallback while nothing is happening.
   */
  get eventsLive(): boolean {
    return this._bus?.live ?? false;
  }

  /**
   * Every tracked session, in the server's order.
   */
  get sessions(): ReadonlyArray<ISession> {
    return this._sessions;
  }

  /**
   * Whether the server extension answers; `missing` stops polling.
   */
  get availability(): Availability {
    return this._availability;
  }

  /**
   * The last failure to refresh, as a sentence; `null` after a success.
   */
  get lastError(): string | null {
    return this._lastError;
  }

  /**
   * Seconds between two refreshes when nothing is in progress.
   */
  set refreshInterval(seconds: number) {
    this._interval = Private.toMs(seconds);
    this._poll.frequency = this._frequency();
  }

  /**
   * The session of a notebook path, if one is tracked. A path can have two:
   * a paused one and a kernel the user started since. The one that needs
   * the user (an operation running, then a checkpoint waiting to be
   * resumed) wins over the plain running one.
   */
  byPath(path: string | null | undefined): ISession | null {
    if (!path) {
      return null;
    }
    const matches = this._sessions.filter(s => s.path === path);
    return matches.sort((a, b) => Private.rank(a) - Private.rank(b))[0] ?? null;
  }

  /**
   * The session with an id, if it is tracked.
   */
  byId(id: string | null | undefined): ISession | null {
    if (!id) {
      return null;
    }
    return this._sessions.find(s => s.id === id) ?? null;
  }

  /**
   * Start polling.
   */
  start(): void {
    if (this._availability !== 'missing' && !this.isDisposed) {
      this._started = true;
      void this._poll.start();
    }
  }

  /**
   * Refresh now, e.g. after a command changed a session.
   */
  async refresh(): Promise<void> {
    if (this._started && this._availability !== 'missing') {
      await this._poll.refresh();
      await this._poll.tick;
    }
  }

  /**
   * Replace one session with a fresher copy (an action's answer) so views
   * update before the next poll.
   */
  update(session: ISession): void {
    const index = this._sessions.findIndex(s => s.id === session.id);
    if (index < 0) {
      return;
    }
    const next = this._sessions.slice();
    next[index] = session;
    this._setSessions(next);
  }

  /**
   * Fetch the sessions and the new events once. The poll calls this; it
   * rejects on failure so the poll backs off.
   */
  async fetch(): Promise<void> {
    this._fetching++;
    try {
      const [sessions, events] = await Promise.all([
        this._api.listSessions(),
        this._api.events(this._eventsSince())
      ]);
      this._setAvailability('available', null);
      this._setSessions(sessions);
      this._takeEvents(events);
      // (the time since the last event counts too: recompute every time)
      this._poll.frequency = this._frequency();
    } catch (error) {
      if (error instanceof GpuPauseError && error.serverExtensionMissing) {
        this._setAvailability('missing', error.message);
        void this._poll.stop();
        return;
      }
      const message = error instanceof Error ? error.message : String(error);
      this._setAvailability(this._availability, message);
      throw error;
    } finally {
      this._fetching--;
      this._refetchIfStale();
    }
  }

  /**
   * Stop polling and release resources.
   */
  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    // Stopping clears the poll's pending timeout, which dispose leaves.
    void this._poll.stop();
    this._poll.dispose();
    if (this._bus && typeof document !== 'undefined') {
      document.removeEventListener('visibilitychange', this._onVisibility);
    }
    this._bus?.dispose();
    this._setTimer(false);
    if (this._renameTimer !== null) {
      clearTimeout(this._renameTimer);
      this._renameTimer = null;
    }
    Signal.clearData(this);
  }

  /**
   * The bus brought lifecycle events: refetch now. A fetch already running
   * may have read the sessions before the change, so it is followed by
   * another one instead. Kernel actions alone only bring the next poll
   * forward to the user's interval: a new notebook's session is not
   * complete when its kernel starts (Lab renames it just after), so a fetch
   * at that moment would show it half made.
   */
  private _onBusEvents(_: LifecycleEventBus, burst: IBurst): void {
    this._settleUntil = Date.now() + SETTLE_MS;
    if (!this._started || this._availability === 'missing') {
      return;
    }
    if (this._fetching > 0) {
      this._stale = this._stale || burst.events.length > 0;
      return;
    }
    if (burst.events.length) {
      void this.refresh();
    } else if (
      this._poll.state.phase !== 'stopped' &&
      this._poll.state.interval > this._interval
    ) {
      void this._poll.schedule({ interval: this._interval, phase: 'resolved' });
    }
  }

  /**
   * The poll stands by while the page is hidden, so events that came
   * meanwhile refreshed nothing: catch up when the user comes back rather
   * than at the next quiet poll.
   */
  private _onVisibility = (): void => {
    if (document.visibilityState === 'visible' && !this.isDisposed) {
      void this.refresh();
    }
  };

  private _onJupyterSessions(): void {
    if (this._renameTimer !== null || this.isDisposed) {
      return;
    }
    this._renameTimer = setTimeout(() => {
      this._renameTimer = null;
      if (
        this._started &&
        this._availability !== 'missing' &&
        !this.isDisposed
      ) {
        if (this._fetching > 0) {
          this._stale = true; // (refetched once the running fetch ends)
        } else {
          void this.refresh();
        }
      }
    }, JUPYTER_SESSIONS_SETTLE_MS);
  }

  private _onLiveChanged(): void {
    this._poll.frequency = this._frequency();
  }

  /**
   * Refetch once the running poll tick has settled, if an event came while
   * it fetched. (A refresh asked for during a refresh tick is dropped by
   * the poll, hence the wait for the tick.)
   */
  private _refetchIfStale(): void {
    if (!this._stale || this.isDisposed) {
      return;
    }
    this._stale = false;
    this._poll.tick.then(
      () => this.refresh(),
      () => undefined
    );
  }

  private _eventsSince(): string {
    if (this._cursor === null) {
      return new Date(Date.now() - FIRST_EVENTS_WINDOW_MS).toISOString();
    }
    return this._cursor;
  }

  /**
   * Announce events not seen before. The server answers events at or after
   * the cursor, so the ones at the cursor's time come again; a key set of
   * that instant filters them. The first answer only sets the cursor: old
   * events are history, not news.
   */
  private _takeEvents(events: IEvent[]): void {
    const fresh = events.filter(e => !this._seen.has(Private.key(e)));
    const first = this._cursor === null;
    if (events.length) {
      const last = events[events.length - 1].time;
      if (last !== this._cursor) {
        this._seen.clear();
      }
      this._cursor = last;
      for (const e of events) {
        if (e.time === last) {
          this._seen.add(Private.key(e));
        }
      }
    } else if (first) {
      this._cursor = new Date(Date.now() - 60 * 1000).toISOString();
    }
    if (!first && fresh.length) {
      // An event the bus should have brought and did not: its websocket
      // closed. Poll as usual until it brings something again.
      if (this._bus?.live && fresh.some(e => !this._bus!.delivered(e))) {
        this._bus.markLost();
      }
      this._eventsReceived.emit(fresh);
    }
  }

  private _setSessions(sessions: ISession[]): void {
    const text = JSON.stringify(sessions);
    if (text === this._sessionsText) {
      return;
    }
    this._sessionsText = text;
    this._sessions = sessions;
    this._poll.frequency = this._frequency();
    this._setTimer(
      sessions.some(s => s.pause_at !== null || s.state === 'waiting')
    );
    this._changed.emit();
  }

  private _setTimer(on: boolean): void {
    if (on && this._timer === null) {
      this._timer = setInterval(() => this._clock.emit(), 1000);
    } else if (!on && this._timer !== null) {
      clearInterval(this._timer);
      this._timer = null;
    }
  }

  private _setAvailability(
    availability: Availability,
    error: string | null
  ): void {
    if (availability === this._availability && error === this._lastError) {
      return;
    }
    this._availability = availability;
    this._lastError = error;
    this._changed.emit();
  }

  /**
   * Fast while something moves without events (progress, queue position),
   * the user's interval while a countdown shows, just after an event, or
   * while the bus is not known to work; slow when the bus would tell of any
   * change that matters.
   */
  private _frequency(): IPoll.Frequency {
    // (a rebuild moves its progress while the session stays active)
    const busy = this._sessions.some(
      s => TRANSITIONAL.includes(s.state) || !!s.progress
    );
    const quiet =
      this.eventsLive &&
      Date.now() >= this._settleUntil &&
      !this._sessions.some(s => s.pause_at !== null);
    const interval = busy
      ? Math.min(BUSY_INTERVAL_MS, this._interval)
      : quiet
        ? Math.max(QUIET_INTERVAL_MS, this._interval)
        : this._interval;
    return { interval, backoff: true, max: Math.max(interval, MAX_BACKOFF_MS) };
  }

  private _api: ISessionsAPI;
  private _availability: Availability = 'unknown';
  private _bus: LifecycleEventBus | null = null;
  private _changed = new Signal<this, void>(this);
  private _clock = new Signal<this, void>(this);
  private _cursor: string | null = null;
  private _eventsReceived = new Signal<this, IEvent[]>(this);
  private _fetching = 0;
  private _interval: number;
  private _lastError: string | null = null;
  private _poll: Poll;
  private _seen = new Set<string>();
  private _sessions: ISession[] = [];
  private _sessionsText = '[]';
  private _settleUntil = 0;
  private _stale = false;
  private _started = false;
  private _timer: ReturnType<typeof setInterval> | null = null;
  private _renameTimer: ReturnType<typeof setTimeout> | null = null;
}

/**
 * Module-private helpers.
 */
namespace Private {
  /**
   * A refresh interval in seconds as milliseconds (at least one second).
   */
  export function toMs(seconds: number): number {
    return Math.max(1, Number(seconds) || 1) * 1000;
  }

  /**
   * Which of a path's sessions to show first: running operations, then
   * sessions to resume (a suspended kernel too), then running kernels.
   */
  export function rank(session: ISession): number {
    return TRANSITIONAL.includes(session.state)
      ? 0
      : session.state === 'paused' ||
          session.state === 'suspended' ||
          session.state === 'failed'
        ? 1
        : 2;
  }

  /**
   * What makes an event unique among those of one instant.
   */
  export function key(e: IEvent): string {
    return `${e.time}|${e.session_id}|${e.type}|${e.reason}`;
  }
}
