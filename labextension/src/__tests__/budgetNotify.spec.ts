/**
 * @jest-environment ./src/__tests__/jsdom-env.js
 */
/**
 * GPU-hour budgets reach the user as toasts: a budget nearly used warns,
 * one used up says that GPU resumes are held, until when, and that the CPU
 * still works; a grant replaces that. A resume the budget refused says the
 * same, with "Resume on CPU".
 *
 * The real sessions model polls a scripted server, and the real commands
 * and REST client answer a canned 409; JupyterLab's toast module, an ES
 * module Jest does not load, records the toasts instead.
 */

jest.mock('@jupyterlab/apputils', () =>
  jest
    .requireActual<typeof import('./apputilsStub')>('./apputilsStub')
    .apputilsStub()
);
jest.mock('@jupyterlab/services', () => ({
  ServerConnection: {
    makeSettings: () => ({ baseUrl: 'http://localhost:8888/' }),
    makeRequest: jest.fn()
  }
}));
jest.mock('@jupyterlab/notebook', () => ({}));

import { Notification } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { CommandRegistry } from '@lumino/commands';
import { IDisposable } from '@lumino/disposable';

import { GpuPauseAPI } from '../api';
import { BudgetNotifier } from '../budget/notify';
import { addCommands } from '../commands';
import { SessionsModel } from '../model';
import {
  CommandIDs,
  DEFAULT_SETTINGS,
  EventType,
  IEvent,
  ISession
} from '../tokens';
import { RENEWS } from './budgets';
import { makeCheckpoint, makeSession, makeSuspended } from './sessions';
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
const dismiss = Notification.dismiss as jest.Mock;
const makeRequest = ServerConnection.makeRequest as unknown as jest.Mock;

/** The renewal as the toasts write it on the user's clock. */
const UNTIL =
  /GPU resumes are held until \d\d:\d\d[^;]*; resuming on the CPU still works\.$/;

let clock = Date.now();

function event(
  type: EventType,
  detail: IEvent['detail'],
  sessionId = 's1'
): IEvent {
  clock += 1000;
  return {
    time: new Date(clock).toISOString(),
    session_id: sessionId,
    type,
    reason: 'budget',
    detail: {
      budget: 'alice',
      used_hours: 40.2,
      limit_hours: 40,
      period_end: RENEWS,
      ...detail
    }
  };
}

function paused(): ISession {
  return makeSession({
    state: 'paused',
    kernel_id: null,
    gpu_session: true,
    checkpoint: makeCheckpoint(6e9, 0)
  });
}

describe('BudgetNotifier', () => {
  let model: SessionsModel;
  let notifier: BudgetNotifier;
  let answer: IEvent[];

  /** One poll of the server answering these new events. */
  async function poll(events: IEvent[] = []): Promise<void> {
    answer = events;
    await model.fetch();
  }

  beforeEach(async () => {
    toasts.length = 0;
    dismiss.mockClear();
    answer = [];
    model = new SessionsModel({
      api: { listSessions: async () => [paused()], events: async () => answer },
      refreshInterval: 5
    });
    notifier = new BudgetNotifier({ model, trans });
    await poll(); // the page's first poll: history
  });

  afterEach(() => {
    notifier.dispose();
    model.dispose();
  });

  it('warns with the server message when a budget is nearly used', async () => {
    // (another event of the burst is not a budget's)
    await poll([
      { ...event('paused', {}), detail: { bytes: 1, message: 'Paused' } },
      event('budget_warned', {
        used_hours: 32.1,
        message: 'You have used 80% of your GPU-hour budget "alice".'
      })
    ]);
    expect(toasts.map(t => [t.type, t.message])).toEqual([
      ['warning', 'You have used 80% of your GPU-hour budget "alice".']
    ]);
    expect(toasts[0].options.autoClose).toBe(false);
  });

  it('says when GPU resumes are held until, once per budget, and a grant replaces it', async () => {
    // When the budget is used up: the server tells it for each of two sessions
    await poll([
      event('budget_held', { retry_at: RENEWS, message: 'Budget used up' }),
      event(
        'budget_held',
        { retry_at: RENEWS, message: 'Budget used up' },
        's2'
      )
    ]);
    // Then one toast says so, until when GPUs are held, and that the CPU works
    expect(toasts.map(t => t.type)).toEqual(['error']);
    expect(toasts[0].message).toMatch(/^GPU-hour budget "alice" is used up: /);
    expect(toasts[0].message).toMatch(UNTIL);
    // When an admin grants more hours
    await poll([
      event('budget_granted', {
        message: 'An admin granted 10 GPU-hours to "alice".'
      })
    ]);
    // Then an info toast says so and replaces the hold's
    expect(toasts.map(t => [t.type, t.message])).toEqual([
      ['error', toasts[0].message],
      ['info', 'An admin granted 10 GPU-hours to "alice".']
    ]);
    expect(dismiss).toHaveBeenCalledWith(toasts[0].id);
  });
});

describe('a resume the budget refused', () => {
  let commands: CommandRegistry;
  let model: SessionsModel;
  let registered: IDisposable;
  let listed: ISession[];
  let executed: string[];

  beforeEach(async () => {
    toasts.length = 0;
    makeRequest.mockReset();
    makeRequest.mockImplementation(
      async () =>
        new Response(
          JSON.stringify({
            message: 'GPU-hour budget "alice" is used up (40.2 of 40 h)',
            reason: 'budget-exceeded',
            retry_at: RENEWS,
            budget: 'alice'
          }),
          { status: 409 }
        )
    );
    commands = new CommandRegistry();
    model = new SessionsModel({
      api: { listSessions: async () => listed, events: async () => [] },
      refreshInterval: 5
    });
    registered = addCommands(
      { commands },
      {
        api: new GpuPauseAPI(),
        model,
        settings: () => DEFAULT_SETTINGS,
        tracker: null,
        openPanel: () => undefined,
        trans
      }
    );
    executed = [];
    // The CPU resume the toast offers: recorded, not run
    commands.commandExecuted.connect((_, args) => {
      executed.push(args.id);
    });
  });

  afterEach(() => {
    registered.dispose();
    model.dispose();
  });

  it('says its message, when GPU resumes are back, and offers Resume on CPU', async () => {
    // Given a paused GPU session
    listed = [paused()];
    await model.fetch();
    // When its resume is refused for the budget
    await commands.execute(CommandIDs.resume, { sessionId: 's1' });
    // Then one error toast names the budget and the renewal (on the user's clock)
    expect(toasts.map(t => t.type)).toEqual(['error']);
    expect(toasts[0].message).toMatch(/^GPU-hour budget "alice" is used up\. /);
    expect(toasts[0].message).toMatch(UNTIL);
    // And its action resumes on the CPU
    const actions = toasts[0].options.actions!;
    expect(actions.map(a => a.label)).toEqual(['Resume on CPU']);
    executed = [];
    makeRequest.mockImplementation(
      async () => new Response(JSON.stringify(paused()), { status: 202 })
    );
    actions[0].callback();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(executed).toEqual([CommandIDs.resumeCpu]);
    const calls = makeRequest.mock.calls;
    const [url, init] = calls[calls.length - 1];
    expect([new URL(url).pathname, JSON.parse(init.body)]).toEqual([
      '/gpu-pause/api/sessions/s1/resume',
      { device: 'cpu' }
    ]);
  });

  it('offers no CPU resume to a suspended kernel, which comes back in place', async () => {
    listed = [makeSuspended('written')];
    await model.fetch();
    await commands.execute(CommandIDs.resume, { sessionId: 's1' });
    expect(toasts[0].message).toMatch(UNTIL);
    expect(toasts[0].options.actions).toEqual([]);
  });
});
