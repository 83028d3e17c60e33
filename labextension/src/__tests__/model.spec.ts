/**
 * The sessions model: one poll for every view, change signals only on real
 * changes, events announced once, and a full stop when the server extension
 * is missing. The API is a scripted stand-in for the REST client.
 */
jest.mock('@jupyterlab/services', () => ({
  ServerConnection: {
    makeSettings: () => ({ baseUrl: '/' }),
    makeRequest: jest.fn()
  }
}));

import { PromiseDelegate } from '@lumino/coreutils';
import { Signal, Stream } from '@lumino/signaling';

import { GpuPauseError, SERVER_EXTENSION_MISSING } from '../api';
import { SessionsModel } from '../model';
import { IEvent, ISession } from '../tokens';
import { makeSession } from './sessions';

function session(
  id: string,
  state: ISession['state'],
  path = `${id}.ipynb`
): ISession {
  const kernel_id = state === 'paused' ? null : `k-${id}`;
  return makeSession({ id, path, state, kernel_id });
}

function event(time: string, type: string, id = 'a'): IEvent {
  return { time, session_id: id, type, reason: 'user', detail: {} };
}

/** A scripted API: each call answers the next prepared sessions/events. */
class FakeAPI {
  sessions: ISession[] = [];
  eventAnswers: IEvent[][] = [];
  sinces: (string | undefined)[] = [];
  fail: Error | null = null;

  async listSessions(): Promise<ISession[]> {
    if (this.fail) {
      throw this.fail;
    }
    return this.sessions;
  }

  async events(since?: string): Promise<IEvent[]> {
    this.sinces.push(since);
    return this.eventAnswers.shift() ?? [];
  }
}

describe('SessionsModel', () => {
  let api: FakeAPI;
  let model: SessionsModel;

  beforeEach(() => {
    api = new FakeAPI();
    model = new SessionsModel({ api: api as any, refreshInterval: 5 });
  });

  afterEach(() => model.dispose());

  it('finds sessions by path and id, and signals only real changes', async () => {
    // Given a server with two sessions
    let changes = 0;
    model.changed.connect(() => changes++);
    api.sessions = [
      session('a', 'active'),
      session('b', 'paused', 'exp/b.ipynb')
    ];
    // When the model fetches twice with the same answer
    await model.fetch();
    await model.fetch();
    // Then it changed once (the availability and the sessions together)
    expect(model.byPath('exp/b.ipynb')?.id).toBe('b');
    expect(model.byId('a')?.state).toBe('active');
    expect(model.byPath('nope.ipynb')).toBeNull();
    expect(model.availability).toBe('available');
    const afterFirst = changes;
    expect(afterFirst).toBeGreaterThan(0);
    await model.fetch();
    expect(changes).toBe(afterFirst);
    // When one session's state changes, it signals again
    api.sessions = [
      session('a', 'pausing'),
      session('b', 'paused', 'exp/b.ipynb')
    ];
    await model.fetch();
    expect(changes).toBe(afterFirst + 1);
  });

  it('announces each new event once, never the history before the page loaded', async () => {
    const received: IEvent[][] = [];
    model.eventsReceived.connect((_, events) => received.push(events));
    // Given events from before the page loaded
    api.eventAnswers = [
      [event('2026-12-02T09:00:00Z', 'paused')],
      // the server answers events at or after the cursor: the last one again
      [
        event('2026-12-02T09:00:00Z', 'paused'),
        event('2026-12-02T10:00:00Z', 'warned')
      ],
      [event('2026-12-02T10:00:00Z', 'warned')]
    ];
    // When the model polls three times
    await model.fetch();
    await model.fetch();
    await model.fetch();
    // Then only the new warning was announced, once
    expect(received).toEqual([[event('2026-12-02T10:00:00Z', 'warned')]]);
    // And later polls ask from the last event seen
    expect(api.sinces[1]).toBe('2026-12-02T09:00:00Z');
    expect(api.sinces[2]).toBe('2026-12-02T10:00:00Z');
  });

  it('stops for good when the server extension is missing', async () => {
    // Given a server without our extension
    api.fail = new GpuPauseError('not enabled', 404, SERVER_EXTENSION_MISSING);
    // When the model fetches
    await model.fetch();
    // Then it says so (and does not throw, so the poll does not retry)
    expect(model.availability).toBe('missing');
    expect(model.lastError).toBe('not enabled');
  });

  it('keeps the last sessions and reports the error while the server is unreachable', async () => {
    api.sessions = [session('a', 'idle')];
    await model.fetch();
    // When the network fails
    api.fail = new GpuPauseError('The Jupyter server could not be reached', 0);
    await expect(model.fetch()).rejects.toThrow('could not be reached');
    // Then the last known sessions stay and the error is shown
    expect(model.byId('a')?.state).toBe('idle');
    expect(model.lastError).toBe('The Jupyter server could not be reached');
    // And a success clears it
    api.fail = null;
    await model.fetch();
    expect(model.lastError).toBeNull();
  });

  it('prefers the paused session of a path over a kernel started since', async () => {
    // Given a paused notebook in which the user started a new kernel
    api.sessions = [
      session('new', 'active', 'exp/a.ipynb'),
      session('old', 'paused', 'exp/a.ipynb')
    ];
    await model.fetch();
    // Then the notebook's views show the paused one, which needs the user
    expect(model.byPath('exp/a.ipynb')?.id).toBe('old');
  });

  it("shows an action's answer at once", async () => {
    api.sessions = [session('a', 'active')];
    await model.fetch();
    model.update(session('a', 'pausing'));
    expect(model.byId('a')?.state).toBe('pausing');
  });

  it('ticks a clock only while a countdown is shown', async () => {
    jest.useFakeTimers();
    try {
      let ticks = 0;
      model.clock.connect(() => ticks++);
      const warned = {
        ...session('a', 'idle'),
        pause_at: '2026-12-02T10:00:00Z'
      };
      api.sessions = [warned];
      await model.fetch();
      jest.advanceTimersByTime(3000);
      expect(ticks).toBe(3);
      api.sessions = [session('a', 'active')];
      await model.fetch();
      jest.advanceTimersByTime(3000);
      expect(ticks).toBe(3);
    } finally {
      jest.useRealTimers();
    }
  });

  it('ticks a clock while a resume waits, so the time waited moves', async () => {
    jest.useFakeTimers();
    try {
      let ticks = 0;
      model.clock.connect(() => ticks++);
      // Given a waiting resume: polls answer the same until the queue moves
      api.sessions = [session('a', 'waiting')];
      await model.fetch();
      // Then views still re-render every second
      jest.advanceTimersByTime(3000);
      expect(ticks).toBe(3);
    } finally {
      jest.useRealTimers();
    }
  });
});

/**
 * The model on jupyter_server's event bus: a burst of lifecycle events
 * refetches at once and once; the poll slows to a fallback only while the
 * bus works and nothing moves without events; a missed event brings the
 * usual poll back. Fake timers drive the real Lumino poll.
 */
describe('SessionsModel on the event bus', () => {
  const SCHEMA = 'https://jupyter-gpu-pause.dev/events/lifecycle';
  let api: CountingAPI;
  let stream: Stream<unknown, any>;
  let model: SessionsModel;

  /** The scripted API, counting fetches; `hold` keeps the next one open. */
  class CountingAPI extends FakeAPI {
    fetches = 0;
    hold: PromiseDelegate<void> | null = null;

    async listSessions(): Promise<ISession[]> {
      this.fetches++;
      const answer = this.sessions;
      if (this.hold) {
        await this.hold.promise;
      }
      return answer;
    }
  }

  /** A lifecycle event on the bus, and its copy in the REST listing. */
  function emitted(type: string, time: string, id = 'a'): any {
    return { schema_id: SCHEMA, ...event(time, type, id), state: 'idle' };
  }

  /** The number of fetches while `ms` pass. */
  async function fetchesDuring(ms: number): Promise<number> {
    const before = api.fetches;
    await jest.advanceTimersByTimeAsync(ms);
    return api.fetches - before;
  }

  beforeEach(async () => {
    jest.useFakeTimers();
    api = new CountingAPI();
    api.sessions = [session('a', 'idle')];
    stream = new Stream<unknown, any>({});
    model = new SessionsModel({
      api: api as any,
      refreshInterval: 5,
      events: stream
    });
    model.start();
    await jest.advanceTimersByTimeAsync(0);
    expect(api.fetches).toBe(1);
  });

  afterEach(() => {
    model.dispose();
    jest.useRealTimers();
  });

  it('refetches once, at once, for a burst of lifecycle events', async () => {
    // Given a running session, then paused on the server
    api.sessions = [session('a', 'paused')];
    // When the pause's events and another extension's arrive together
    stream.emit(emitted('paused', '2026-12-02T09:00:00Z'));
    stream.emit({ schema_id: 'https://example.org/other', action: 'x' });
    stream.emit(emitted('checkpoint_deleted', '2026-12-02T09:00:01Z'));
    // Then within a fraction of a second, far before the next poll, the
    // model fetched once and shows the session paused
    expect(await fetchesDuring(500)).toBe(1);
    expect(model.byId('a')?.state).toBe('paused');
  });

  it('lists a kernel started elsewhere without waiting for the fallback poll', async () => {
    // Given a live bus and a quiet session: the 30 s fallback
    stream.emit({ schema_id: 'https://example.org/other', action: 'x' });
    await fetchesDuring(5_000);
    // When a notebook is opened in another tab: a kernel starts, and its
    // session is complete a moment later (Lab renames it just after)
    stream.emit({
      schema_id: 'https://events.jupyter.org/jupyter_server/kernel_actions/v1',
      action: 'start',
      status: 'success'
    });
    expect(await fetchesDuring(500)).toBe(0);
    api.sessions = [session('a', 'idle'), session('b', 'active')];
    // Then the model lists it at the usual interval, not 30 s later
    expect(await fetchesDuring(5_000)).toBe(1);
    expect(model.byId('b')?.state).toBe('active');
  });

  it("shows a renamed notebook's name as soon as Jupyter's sessions change", async () => {
    // Given a model that also follows Jupyter's own list of sessions, on a
    // live bus with nothing moving (the 30 s fallback)
    model.dispose();
    const jupyterSessions = new Signal<unknown, unknown>({});
    model = new SessionsModel({
      api: api as any,
      refreshInterval: 5,
      events: stream,
      jupyterSessions
    });
    model.start();
    stream.emit({ schema_id: 'https://example.org/other', action: 'x' });
    await fetchesDuring(5_000);
    // When Lab renames the notebook: Jupyter's session list changes, several
    // times for one action
    api.sessions = [session('a', 'idle', 'renamed.ipynb')];
    jupyterSessions.emit(undefined);
    jupyterSessions.emit(undefined);
    // Then the model fetched once, within a second, and shows the new name
    expect(await fetchesDuring(1_000)).toBe(1);
    expect(model.byId('a')?.path).toBe('renamed.ipynb');
  });

  it('does nothing on events of other schemas', async () => {
    // When only other extensions' events arrive
    api.sessions = [session('a', 'paused')];
    stream.emit({ schema_id: 'https://example.org/other', action: 'x' });
    // Then the model waits for its poll
    expect(await fetchesDuring(500)).toBe(0);
    expect(model.byId('a')?.state).toBe('idle');
  });

  it('follows an event that came during a fetch with another fetch', async () => {
    // Given a fetch under way that read the sessions before a change
    api.hold = new PromiseDelegate<void>();
    stream.emit(emitted('keepalive', '2026-12-02T09:00:00Z'));
    await jest.advanceTimersByTimeAsync(200);
    expect(api.fetches).toBe(2);
    // When the session is paused meanwhile and the bus says so
    api.sessions = [session('a', 'paused')];
    stream.emit(emitted('paused', '2026-12-02T09:00:05Z'));
    await jest.advanceTimersByTimeAsync(200);
    // Then once the first fetch ends, another one shows the pause at once
    const hold = api.hold;
    api.hold = null;
    hold.resolve();
    expect(await fetchesDuring(200)).toBe(1);
    expect(model.byId('a')?.state).toBe('paused');
  });

  it('polls every 30 s only while the bus works and nothing needs watching', async () => {
    // Given a quiet session and a bus nothing has arrived on: the usual 5 s
    expect(model.eventsLive).toBe(false);
    expect(await fetchesDuring(20_000)).toBe(4);
    // When something arrives on the bus, it is known to work
    stream.emit({ schema_id: 'https://example.org/other', action: 'x' });
    expect(model.eventsLive).toBe(true);
    // Then, after the tick already due, the poll is a 30 s fallback
    await fetchesDuring(5_000);
    expect(await fetchesDuring(60_000)).toBe(2);

    // When the policy warns: the countdown to the pause needs the poll
    api.sessions = [
      { ...session('a', 'idle'), pause_at: '2026-12-02T10:00:00Z' }
    ];
    api.eventAnswers = [[event('2026-12-02T09:00:00Z', 'warned')]];
    stream.emit(emitted('warned', '2026-12-02T09:00:00Z'));
    // Then it polls at the usual interval again, the bus still live
    expect(await fetchesDuring(22_000)).toBe(5);
    expect(model.eventsLive).toBe(true);

    // When a pause runs: progress moves without events, every second
    api.sessions = [session('a', 'pausing')];
    stream.emit(emitted('paused', '2026-12-02T09:00:10Z'));
    await fetchesDuring(1_000);
    expect(await fetchesDuring(10_000)).toBe(10);

    // When everything is quiet again, a minute after the last event, back
    // to the fallback
    api.sessions = [session('a', 'paused')];
    await fetchesDuring(60_000);
    expect(await fetchesDuring(60_000)).toBe(2);
  });

  it('keeps the usual interval after an event, for what the server finishes a moment later', async () => {
    // Given a live bus and a quiet session: the 30 s fallback
    stream.emit({ schema_id: 'https://example.org/other', action: 'x' });
    await fetchesDuring(5_000);
    // When a policy's warning comes on the bus before the session shows its
    // countdown (the server's idle monitor sets it at its next pass)
    api.eventAnswers = [[event('2026-12-02T09:00:00Z', 'warned')]];
    stream.emit(emitted('warned', '2026-12-02T09:00:00Z'));
    expect(await fetchesDuring(500)).toBe(1);
    expect(model.byId('a')?.pause_at).toBeNull();
    const pauseAt = '2026-12-02T09:01:00Z';
    api.sessions = [{ ...session('a', 'idle'), pause_at: pauseAt }];
    // Then the countdown shows at the next usual poll, not 30 s later
    await fetchesDuring(5_000);
    expect(model.byId('a')?.pause_at).toBe(pauseAt);
  });

  it('goes back to the usual poll when the bus missed an event', async () => {
    // Given a live bus and a quiet session: the 30 s fallback
    stream.emit({ schema_id: 'https://example.org/other', action: 'x' });
    await fetchesDuring(5_000);
    // When the fallback poll finds an event the bus never brought
    api.eventAnswers = [[event('2026-12-02T09:00:00Z', 'culled')]];
    expect(await fetchesDuring(30_000)).toBe(1);
    // Then the bus is not trusted and the usual 5 s poll is back
    expect(model.eventsLive).toBe(false);
    expect(await fetchesDuring(20_000)).toBe(4);
    // Until the bus brings something again
    stream.emit({ schema_id: 'https://example.org/other', action: 'x' });
    expect(model.eventsLive).toBe(true);
  });

  it('leaves no timer behind when disposed', async () => {
    // Given a model polling on its 30 s fallback
    stream.emit({ schema_id: 'https://example.org/other', action: 'x' });
    await fetchesDuring(5_000);
    // When it is disposed
    model.dispose();
    // Then no poll, burst or clock timer is pending, and events do nothing
    expect(jest.getTimerCount()).toBe(0);
    stream.emit(emitted('paused', '2026-12-02T09:00:00Z'));
    expect(await fetchesDuring(60_000)).toBe(0);
  });
});
