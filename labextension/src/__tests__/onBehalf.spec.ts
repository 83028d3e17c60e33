/**
 * @jest-environment ./src/__tests__/jsdom-env.js
 */
/**
 * A pause, or a cancel, that an admin asked for on the user's behalf
 * reaches the user once, as a warning that stays: who did it and what they
 * said ("Paused by an admin (carol): maintenance at 9."), with Resume after
 * a pause. The usual "Paused" toast gives way to it; the user's own pauses
 * are told as before.
 *
 * The real sessions model polls a scripted server; JupyterLab's toast
 * module, an ES module Jest does not load, records the toasts instead.
 */

jest.mock('@jupyterlab/apputils', () =>
  jest
    .requireActual<typeof import('./apputilsStub')>('./apputilsStub')
    .apputilsStub()
);
jest.mock('@jupyterlab/services', () => ({
  ServerConnection: { makeSettings: () => ({ baseUrl: '/' }) }
}));
jest.mock('@jupyterlab/notebook', () => ({}));

import { Notification } from '@jupyterlab/apputils';
import { CommandRegistry } from '@lumino/commands';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import { SessionsModel } from '../model';
import { OnBehalfNotifier } from '../onbehalf/notify';
import { onBehalfOf, onBehalfText } from '../onbehalf/text';
import { EventNotifier } from '../session/notify';
import { CommandIDs, IEvent, ISession } from '../tokens';
import { makeCheckpoint, makeSession } from './sessions';
import { trans } from './translation';

/** What the toast stand-in recorded. */
interface IToast {
  id: string;
  type: string;
  message: string;
  options: {
    autoClose?: number | false;
    actions?: { label: string; callback: () => void }[];
  };
}

const toasts = (Notification as any).toasts as IToast[];

let clock = Date.parse('2026-12-02T09:00:00Z');

function event(
  type: string,
  detail: IEvent['detail'],
  reason = 'admin'
): IEvent {
  clock += 1000;
  return {
    time: new Date(clock).toISOString(),
    session_id: 's1',
    type,
    reason,
    detail
  };
}

const CAROL = {
  by: 'carol',
  via: 'gpu-pause',
  admin_message: 'maintenance at 9'
};

function paused(): ISession {
  return makeSession({
    path: 'exp/train.ipynb',
    state: 'paused',
    kernel_id: null,
    checkpoint: makeCheckpoint(6e9, 4e9)
  });
}

describe('the words of an admin acting for the user', () => {
  it('name the admin and say what they said', () => {
    const e = event('paused', { bytes: 6e9, ...CAROL });
    expect(onBehalfOf(e)).toBe('carol');
    expect(onBehalfText('train.ipynb', e, trans)).toBe(
      'Paused by an admin (carol): maintenance at 9. train.ipynb is saved with its variables: resume it when you are ready.'
    );
    expect(
      onBehalfText(
        'train.ipynb',
        event('paused', { by: 'carol', via: null, admin_message: null }),
        trans
      )
    ).toBe(
      'Paused by an admin (carol). train.ipynb is saved with its variables: resume it when you are ready.'
    );
  });

  it('say which cancel it was and what it left', () => {
    expect(
      onBehalfText(
        'train.ipynb',
        event('cancelled', { operation: 'pause', ...CAROL }),
        trans
      )
    ).toBe(
      'The pause of train.ipynb was cancelled by an admin (carol): maintenance at 9. Its kernel runs on, untouched.'
    );
    expect(
      onBehalfText(
        'train.ipynb',
        event('cancelled', { operation: 'resume', by: 'carol' }),
        trans
      )
    ).toBe(
      'The resume of train.ipynb was cancelled by an admin (carol). It stays paused.'
    );
  });

  it('are none for what the user or a policy did', () => {
    const own = event('paused', { by: null, via: null }, 'user');
    expect(onBehalfOf(own)).toBeNull();
    expect(onBehalfText('train.ipynb', own, trans)).toBe('');
    expect(onBehalfOf(event('warned', { by: 'carol' }))).toBeNull();
  });
});

describe('OnBehalfNotifier, beside the EventNotifier', () => {
  let model: SessionsModel;
  let commands: CommandRegistry;
  let notifiers: { dispose(): void }[];
  let executed: [string, ReadonlyPartialJSONObject][];
  let answer: { sessions: ISession[]; events: IEvent[] };

  async function poll(events: IEvent[] = []): Promise<void> {
    answer = { sessions: [paused()], events };
    await model.fetch();
  }

  beforeEach(async () => {
    toasts.length = 0;
    executed = [];
    commands = new CommandRegistry();
    commands.addCommand(CommandIDs.resume, {
      execute: args => void executed.push([CommandIDs.resume, args])
    });
    answer = { sessions: [], events: [] };
    model = new SessionsModel({
      api: {
        listSessions: async () => answer.sessions,
        events: async () => answer.events
      },
      refreshInterval: 5
    });
    notifiers = [
      new EventNotifier({
        model,
        commands,
        tracker: null,
        sessions: { refreshRunning: async () => undefined } as any,
        trans
      }),
      new OnBehalfNotifier({ model, commands, trans })
    ];
    await poll(); // the page's first poll: history
  });

  afterEach(() => {
    notifiers.forEach(n => n.dispose());
    model.dispose();
  });

  it('tells a pause on the user’s behalf once, as a warning that stays, with Resume', async () => {
    // When the server records that carol paused the session, twice seen
    const e = event('paused', { bytes: 6e9, ...CAROL });
    await poll([e]);
    await poll([e]);
    // Then one warning says who and why, stays, and offers Resume
    expect(toasts.map(t => t.type)).toEqual(['warning']);
    const [toast] = toasts;
    expect(toast.message).toMatch(
      /^Paused by an admin \(carol\): maintenance at 9\. train\.ipynb is saved/
    );
    expect(toast.options.autoClose).toBe(false);
    expect(toast.options.actions!.map(a => a.label)).toEqual(['Resume']);
    toast.options.actions![0].callback();
    expect(executed).toEqual([[CommandIDs.resume, { sessionId: 's1' }]]);
  });

  it('tells a cancel on the user’s behalf, and no cancel of the user’s own', async () => {
    await poll([
      event('cancelled', { operation: 'pause' }, 'user'),
      event('cancelled', { operation: 'pause', ...CAROL })
    ]);
    expect(toasts.map(t => [t.type, t.message])).toEqual([
      [
        'warning',
        'The pause of train.ipynb was cancelled by an admin (carol): maintenance at 9. Its kernel runs on, untouched.'
      ]
    ]);
    expect(toasts[0].options.actions).toEqual([]);
  });

  it('leaves the user’s own pause to the usual toast', async () => {
    await poll([
      event(
        'paused',
        { bytes: 6e9, by: null, via: null, admin_message: null },
        'user'
      )
    ]);
    expect(toasts.map(t => t.type)).toEqual(['success']);
    expect(toasts[0].message).toMatch(/^Paused train\.ipynb/);
  });
});
