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
