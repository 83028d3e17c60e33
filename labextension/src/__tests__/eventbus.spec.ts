/**
 * The event bus listener: only this extension's lifecycle events and
 * Jupyter's kernel actions pass, a burst reaches listeners once, and the bus counts as live from the first
 * emission until an event it should have brought is found missing. The
 * stream is a real Lumino stream, as `serviceManager.events.stream` is.
 */
import { Stream } from '@lumino/signaling';

import {
  COALESCE_MS,
  IBurst,
  KERNEL_ACTIONS_SCHEMA_ID,
  LIFECYCLE_SCHEMA_ID,
  LifecycleEventBus
} from '../eventbus';

/** A lifecycle event as jupyter_server's websocket sends it. */
function lifecycle(type: string, time: string, id = 's1'): any {
  return {
    schema_id: LIFECYCLE_SCHEMA_ID,
    __schema_version__: 1,
    __timestamp__: time,
    time,
    session_id: id,
    type,
    reason: 'user',
    detail: { message: `${type} ${id}` },
    path: `${id}.ipynb`,
    state: type === 'paused' ? 'paused' : 'active',
    kernel_id: type === 'paused' ? null : `k-${id}`
  };
}

/** Another extension's event on the same bus: jupyter_server's contents. */
const CONTENTS = {
  schema_id: 'https://events.jupyter.org/jupyter_server/contents_service/v1',
  action: 'get',
  path: ''
};

describe('LifecycleEventBus', () => {
  let stream: Stream<unknown, any>;
  let bus: LifecycleEventBus;
  let bursts: IBurst[];

  beforeEach(() => {
    jest.useFakeTimers();
    stream = new Stream<unknown, any>({});
    bus = new LifecycleEventBus({ stream });
    bursts = [];
    bus.received.connect((_, burst) => bursts.push(burst));
  });

  afterEach(() => {
    bus.dispose();
    jest.useRealTimers();
  });

  it('passes on only lifecycle events, a burst of them once', () => {
    // Given a bus that carries other extensions' events too
    // When a pause ends with two events and a file is listed meanwhile
    stream.emit(lifecycle('paused', '2026-12-02T09:00:00.100000+00:00'));
    stream.emit(CONTENTS);
    stream.emit(lifecycle('checkpoint_deleted', '2026-12-02T09:00:00.2Z'));
    // Then nothing is heard until the burst is gathered
    expect(bursts).toEqual([]);
    jest.advanceTimersByTime(COALESCE_MS);
    // And then the two lifecycle events, once, with what the bus said
    expect(bursts).toHaveLength(1);
    expect(bursts[0].kernelActions).toBe(0);
    expect(bursts[0].events.map(e => e.type)).toEqual([
      'paused',
      'checkpoint_deleted'
    ]);
    expect(bursts[0].events[0]).toEqual({
      time: '2026-12-02T09:00:00.100000+00:00',
      session_id: 's1',
      type: 'paused',
      reason: 'user',
      detail: { message: 'paused s1' },
      path: 's1.ipynb',
      state: 'paused',
      kernel_id: null
    });
    // And a later event is a burst of its own
    stream.emit(lifecycle('resumed', '2026-12-02T09:01:00Z'));
    jest.advanceTimersByTime(COALESCE_MS);
    expect(bursts.map(b => b.events.length)).toEqual([2, 1]);
  });

  it("passes on Jupyter's kernel actions, which add or settle sessions", () => {
    // When a kernel starts and another shuts down, with no lifecycle event
    for (const action of ['start', 'shutdown']) {
      stream.emit({
        schema_id: KERNEL_ACTIONS_SCHEMA_ID,
        action,
        kernel_name: 'python3',
        status: 'success',
        msg: `Kernel ${action}`
      });
    }
    jest.advanceTimersByTime(COALESCE_MS);
    // Then listeners hear of both, once
    expect(bursts).toEqual([{ events: [], kernelActions: 2 }]);
  });

  it('ignores emissions of its schema that do not name an event', () => {
    // When an emission of our schema lacks the session or the type
    stream.emit({ schema_id: LIFECYCLE_SCHEMA_ID, time: '2026-12-02T09:00Z' });
    jest.advanceTimersByTime(COALESCE_MS);
    // Then no one hears of it
    expect(bursts).toEqual([]);
  });

  it('is live from the first emission of any schema until an event goes missing', () => {
    const changes: boolean[] = [];
    bus.liveChanged.connect((_, live) => changes.push(live));
    // Given a bus nothing has arrived on: not known to work
    expect(bus.live).toBe(false);
    // When another extension's event arrives, the websocket is proven open
    stream.emit(CONTENTS);
    expect(bus.live).toBe(true);
    // When the REST catch-up finds an event the bus did not bring
    bus.markLost();
    // Then it is not live, until something arrives on it again
    expect(bus.live).toBe(false);
    stream.emit(lifecycle('warned', '2026-12-02T09:00:00Z'));
    expect(bus.live).toBe(true);
    expect(changes).toEqual([true, false, true]);
  });

  it('knows which events it brought, however the server spells the time', () => {
    // Given a pause event that came on the bus
    stream.emit(lifecycle('paused', '2026-12-02T09:00:00.250000+00:00'));
    // Then the REST listing's copy of it counts as delivered
    const listed = {
      time: '2026-12-02T09:00:00.250Z',
      session_id: 's1',
      type: 'paused',
      reason: 'user',
      detail: {}
    };
    expect(bus.delivered(listed)).toBe(true);
    // And another session's event of the same instant does not
    expect(bus.delivered({ ...listed, session_id: 's2' })).toBe(false);
    expect(bus.delivered({ ...listed, type: 'resumed' })).toBe(false);
  });

  it('stops listening when disposed, dropping a burst being gathered', () => {
    // Given an event being gathered
    stream.emit(lifecycle('paused', '2026-12-02T09:00:00Z'));
    // When the bus is disposed
    bus.dispose();
    // Then no timer is left and nothing is heard, now or later
    expect(jest.getTimerCount()).toBe(0);
    stream.emit(lifecycle('resumed', '2026-12-02T09:01:00Z'));
    jest.advanceTimersByTime(10 * COALESCE_MS);
    expect(bursts).toEqual([]);
    expect(bus.isDisposed).toBe(true);
  });
});
