/**
 * The server's lifecycle events as they happen, from jupyter_server's event
 * bus (the websocket behind `serviceManager.events.stream`), so the views
 * update at once instead of at the next poll. Jupyter's own kernel actions
 * count too: a kernel started or shut down adds or settles a session, and
 * no lifecycle event says so.
 *
 * The bus says *that* something changed, not everything that did: the
 * sessions model refetches on each burst and keeps polling as a fallback.
 * Nothing here announces anything to the user; the model's REST catch-up
 * does, once, whichever way the news came.
 */
import type { Event } from '@jupyterlab/services';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { ILifecycleEmission, IEvent } from './tokens';

/**
 * The `$id` of the server's lifecycle event schema on the event bus.
 */
export const LIFECYCLE_SCHEMA_ID =
  'https://jupyter-gpu-pause.dev/events/lifecycle';

/**
 * The `$id` of jupyter_server's kernel action events (start, shutdown,
 * restart, interrupt).
 */
export const KERNEL_ACTIONS_SCHEMA_ID =
  'https://events.jupyter.org/jupyter_server/kernel_actions/v1';

/**
 * How long a burst of events is gathered before listeners hear of it, in
 * milliseconds: a pause that ends with several events costs one refetch.
 */
export const COALESCE_MS = 100;

/**
 * How many delivered events are remembered to tell the REST catch-up which
 * ones the bus already brought (far more than one poll interval sees).
 */
const REMEMBERED = 500;

/**
 * The emissions of an event stream (`Event.Stream` is one).
 */
export type Emissions = ISignal<unknown, Event.Emission>;

/**
 * What changed on the server during a burst.
 */
export interface IBurst {
  /** This extension's lifecycle events, oldest first. */
  events: ILifecycleEmission[];
  /** How many kernel actions jupyter_server reported. */
  kernelActions: number;
}

/**
 * Construction options of {@link LifecycleEventBus}.
 */
export interface ILifecycleEventBusOptions {
  /** jupyter_server's event stream: `app.serviceManager.events.stream`. */
  stream: Emissions;
  /** Milliseconds a burst is gathered for; {@link COALESCE_MS} by default. */
  coalesceMs?: number;
}

/**
 * Listens to jupyter_server's event bus for this extension's lifecycle
 * events and Jupyter's kernel actions, and tells whether the bus is known
 * to work.
 *
 * The bus is `live` once anything arrives on it (every emission, of any
 * schema, proves the websocket is open) and stops being live when the REST
 * catch-up finds an event the bus never brought ({@link markLost}): the
 * websocket closed, and events sent meanwhile are gone. Lab's event manager
 * reconnects by itself; the next emission makes it live again.
 */
export class LifecycleEventBus implements IDisposable {
  constructor(options: ILifecycleEventBusOptions) {
    this._stream = options.stream;
    this._coalesceMs = options.coalesceMs ?? COALESCE_MS;
    this._stream.connect(this._onEmission, this);
  }

  /**
   * Emitted once per burst of lifecycle events or kernel actions.
   */
  get received(): ISignal<this, IBurst> {
    return this._received;
  }

  /**
   * Emitted when {@link live} changes.
   */
  get liveChanged(): ISignal<this, boolean> {
    return this._liveChanged;
  }

  /**
   * Whether the bus is known to deliver events: something arrived on it
   * and no event has been missed since.
   */
  get live(): boolean {
    return this._live;
  }

  /**
   * Whether the bus has been disposed.
   */
  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * Whether the bus brought this event (as listed by the REST API).
   */
  delivered(event: IEvent): boolean {
    return this._delivered.has(Private.key(event));
  }

  /**
   * Say that the bus missed an event: until something arrives on it again,
   * it is not live.
   */
  markLost(): void {
    this._setLive(false);
  }

  /**
   * Stop listening; a burst being gathered is dropped.
   */
  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._stream.disconnect(this._onEmission, this);
    if (this._timer !== null) {
      clearTimeout(this._timer);
      this._timer = null;
    }
    this._pending = [];
    this._kernelActions = 0;
    Signal.clearData(this);
  }

  private _onEmission(_: unknown, emission: Event.Emission): void {
    this._setLive(true);
    if (emission.schema_id === KERNEL_ACTIONS_SCHEMA_ID) {
      this._kernelActions++;
    } else if (emission.schema_id === LIFECYCLE_SCHEMA_ID) {
      const event = Private.lifecycle(emission);
      if (!event) {
        return;
      }
      this._remember(event);
      this._pending.push(event);
    } else {
      return;
    }
    if (this._timer === null) {
      this._timer = setTimeout(() => this._flush(), this._coalesceMs);
    }
  }

  private _flush(): void {
    this._timer = null;
    const burst = { events: this._pending, kernelActions: this._kernelActions };
    this._pending = [];
    this._kernelActions = 0;
    this._received.emit(burst);
  }

  private _remember(event: IEvent): void {
    const key = Private.key(event);
    this._delivered.delete(key);
    this._delivered.add(key);
    if (this._delivered.size > REMEMBERED) {
      const oldest = this._delivered.values().next().value as string;
      this._delivered.delete(oldest);
    }
  }

  private _setLive(live: boolean): void {
    if (live === this._live) {
      return;
    }
    this._live = live;
    this._liveChanged.emit(live);
  }

  private _coalesceMs: number;
  private _delivered = new Set<string>();
  private _isDisposed = false;
  private _kernelActions = 0;
  private _live = false;
  private _liveChanged = new Signal<this, boolean>(this);
  private _pending: ILifecycleEmission[] = [];
  private _received = new Signal<this, IBurst>(this);
  private _stream: Emissions;
  private _timer: ReturnType<typeof setTimeout> | null = null;
}

/**
 * Module-private helpers.
 */
namespace Private {
  /**
   * The lifecycle event an emission carries, or `null` when it lacks what
   * identifies one (a schema this client does not know yet).
   */
  export function lifecycle(
    emission: Event.Emission
  ): ILifecycleEmission | null {
    const data = emission as { [key: string]: any };
    if (
      typeof data.time !== 'string' ||
      typeof data.session_id !== 'string' ||
      typeof data.type !== 'string'
    ) {
      return null;
    }
    return {
      time: data.time,
      session_id: data.session_id,
      type: data.type,
      reason: typeof data.reason === 'string' ? data.reason : '',
      detail: data.detail && typeof data.detail === 'object' ? data.detail : {},
      path: typeof data.path === 'string' ? data.path : null,
      state: typeof data.state === 'string' ? data.state : null,
      kernel_id: typeof data.kernel_id === 'string' ? data.kernel_id : null
    };
  }

  /**
   * What identifies an event in both the bus and the REST listing; the time
   * as an instant, so two spellings of it compare equal.
   */
  export function key(event: IEvent): string {
    const instant = Date.parse(event.time);
    const time = Number.isNaN(instant) ? event.time : String(instant);
    return `${time}|${event.session_id}|${event.type}`;
  }
}
