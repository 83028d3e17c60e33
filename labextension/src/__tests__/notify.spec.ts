/**
 * @jest-environment ./src/__tests__/jsdom-env.js
 */
/**
 * What a waiting resume does by itself reaches the user once: "a GPU is
 * free — restoring now", or that no GPU became free in time, with Resume.
 * What the user did themselves (Cancel, Resume on CPU now) is not news.
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
import { EventNotifier } from '../session/notify';
import { pauseFailedText, resumedText } from '../session/text';
import { suspendedEventText } from '../suspend/text';
import { CommandIDs, EventType, IEvent, ISession } from '../tokens';
import {
  makeCheckpoint,
  makeSession,
  makeSuspended,
  makeWaiting
} from './sessions';
import { trans } from './translation';

/** What the toast stand-in recorded. */
interface IToast {
  id: string;
  type: string;
  message: string;
  options: { actions?: { label: string; callback: () => void }[] };
}

const toasts = (Notification as any).toasts as IToast[];
const dismiss = Notification.dismiss as jest.Mock;

const SINCE = '2026-12-02T09:57:00Z';
const TIMEOUT_MESSAGE =
  'no GPU became free within 30 min; your checkpoint is intact — Resume to try again';

function waiting(overrides: Partial<ISession> = {}): ISession {
  return makeWaiting(SINCE, overrides);
}

function restoring(overrides: Partial<ISession> = {}): ISession {
  return makeSession({
    state: 'restoring',
    kernel_id: 'k2',
    checkpoint: makeCheckpoint(6e9, 4e9),
    progress: { phase: 'loading', done_bytes: 1e9, total_bytes: 6e9 },
    ...overrides
  });
}

function timedOut(gpuBytes = 4e9): ISession {
  return makeSession({
    state: 'failed',
    kernel_id: null,
    checkpoint: makeCheckpoint(6e9, gpuBytes),
    error: {
      reason: 'capacity-timeout',
      state_intact: true,
      message: TIMEOUT_MESSAGE
    }
  });
}

function event(type: string, detail: IEvent['detail'] = {}): IEvent {
  return {
    time: new Date().toISOString(),
    session_id: 's1',
    type,
    reason: 'user',
    detail
  };
}

describe('EventNotifier', () => {
  let model: SessionsModel;
  let commands: CommandRegistry;
  let notifier: EventNotifier;
  let executed: [string, ReadonlyPartialJSONObject][];
  let answer: { sessions: ISession[]; events: IEvent[] };

  /** One poll of the server answering these sessions and new events. */
  async function poll(sessions: ISession[], events: IEvent[] = []) {
    answer = { sessions, events };
    await model.fetch();
  }

  beforeEach(() => {
    toasts.length = 0;
    dismiss.mockClear();
    executed = [];
    commands = new CommandRegistry();
    for (const id of [
      CommandIDs.resume,
      CommandIDs.resumeCpu,
      CommandIDs.cancel
    ]) {
      commands.addCommand(id, {
        execute: args => void executed.push([id, args])
      });
    }
    answer = { sessions: [], events: [] };
    model = new SessionsModel({
      api: {
        listSessions: async () => answer.sessions,
        events: async () => answer.events
      },
      refreshInterval: 5
    });
    notifier = new EventNotifier({
      model,
      commands,
      tracker: null,
      sessions: { refreshRunning: async () => undefined } as any,
      trans
    });
  });

  afterEach(() => {
    notifier.dispose();
    model.dispose();
  });

  it('says once that a GPU is free when a waiting resume goes on by itself', async () => {
    // Given a resume waiting in line (the page's first poll: history)
    await poll([waiting()]);
    expect(toasts).toEqual([]);
    // When a GPU frees and the restore starts, over two polls
    await poll([restoring()]);
    await poll([restoring({ progress: null })]);
    // Then the user is told once
    expect(toasts.map(t => t.message)).toEqual([
      'train.ipynb: a GPU is free — restoring now'
    ]);
    // And the resume's own toast replaces it when it is done
    await poll(
      [makeSession({ state: 'active', device: 'gpu' })],
      [event('resumed', { message: 'Restored 4 objects', device: 'gpu' })]
    );
    expect(toasts.map(t => t.message)).toEqual([
      'train.ipynb: a GPU is free — restoring now',
      'Resumed train.ipynb. Restored 4 objects.'
    ]);
    expect(dismiss).toHaveBeenCalledWith(toasts[0].id);
  });

  it('says once where in line a new wait stands and why', async () => {
    // Given a paused session (the page's first poll: history)
    await poll([makeSession({ state: 'paused', kernel_id: null })]);
    // When its resume joins the line, the server saying where and why
    const message = waiting().message!;
    await poll([waiting()], [event('waiting', { position: 2, message })]);
    // Then the toast names the notebook and gives the server's sentence once
    expect(toasts.map(t => t.message)).toEqual([
      'train.ipynb: Waiting for a GPU (#2 in line): the limit of 1 GPU session on this machine is in use.'
    ]);
    // And without a message (a later event) it still says that it waits
    const later = new Date(Date.now() + 1000).toISOString();
    await poll([waiting()], [{ ...event('waiting'), time: later }]);
    expect(toasts[1].message).toBe('train.ipynb is waiting for a free GPU.');
  });

  it('says a GPU became free when the resume was done before the next poll', async () => {
    await poll([waiting()]);
    await poll([makeSession({ state: 'idle', device: 'gpu' })]);
    expect(toasts.map(t => t.message)).toEqual([
      'train.ipynb: a GPU became free — resumed'
    ]);
  });

  it('is silent when the user moved the resume out of the queue', async () => {
    // Given a waiting resume
    await poll([waiting()]);
    // When the user resumes it on the CPU now, and it restores
    await commands.execute(CommandIDs.resumeCpu, { sessionId: 's1' });
    await poll([restoring()]);
    // Then nothing says a GPU is free
    expect(toasts).toEqual([]);

    // And after a Cancel and a new wait, the queue's news is news again
    await poll([waiting()]);
    await commands.execute(CommandIDs.cancel, { sessionId: 's1' });
    await poll([makeSession({ state: 'paused', kernel_id: null })]);
    await poll([waiting()]);
    await poll([restoring()]);
    expect(toasts.map(t => t.message)).toEqual([
      'train.ipynb: a GPU is free — restoring now'
    ]);
  });

  it('says once that no GPU became free in time, with Resume and Resume on CPU', async () => {
    // Given a waiting resume
    await poll([waiting()]);
    // When it fails for want of a GPU, and the failure's event follows
    await poll([timedOut()]);
    await poll(
      [timedOut()],
      [
        event('resume_failed', {
          message: 'no GPU became free within 30 min',
          error_reason: 'capacity-timeout'
        })
      ]
    );
    // Then one warning says what happened and that the checkpoint is intact
    expect(toasts.map(t => [t.type, t.message])).toEqual([
      [
        'warning',
        'train.ipynb: No GPU became free within 30 min; your checkpoint is intact — Resume to try again.'
      ]
    ]);
    // And its actions resume the session, on a GPU or on the CPU
    const actions = toasts[0].options.actions!;
    expect(actions.map(a => a.label)).toEqual(['Resume', 'Resume on CPU']);
    actions[0].callback();
    expect(executed).toEqual([[CommandIDs.resume, { sessionId: 's1' }]]);
  });

  it('tells a timeout once when its event comes before the snapshot', async () => {
    // Given a waiting resume whose checkpoint holds no GPU tensors
    const cpuOnly = { checkpoint: makeCheckpoint(6e9, 0) };
    await poll([waiting(cpuOnly)]);
    // When the event arrives while the poll still lists the session waiting
    await poll(
      [waiting(cpuOnly)],
      [
        event('resume_failed', {
          message: TIMEOUT_MESSAGE,
          error_reason: 'capacity-timeout'
        })
      ]
    );
    await poll([timedOut(0)]);
    // Then one warning, and no Resume on CPU without GPU tensors
    expect(toasts.map(t => t.type)).toEqual(['warning']);
    expect(toasts[0].message).toBe(
      'train.ipynb: No GPU became free within 30 min; your checkpoint is intact — Resume to try again.'
    );
    expect(toasts[0].options.actions!.map(a => a.label)).toEqual(['Resume']);
  });

  it('says where a resumed kernel runs and how long it waited', async () => {
    await poll([waiting()]);
    await poll(
      [makeSession({ state: 'active', device: 'cpu' })],
      [
        event('resumed', {
          message: 'Restored 4 objects',
          device: 'cpu',
          waited_seconds: 180
        })
      ]
    );
    // The user moved nothing, but a CPU kernel is no "GPU is free"
    expect(toasts.map(t => t.message)).toEqual([
      'Resumed train.ipynb on the CPU. Restored 4 objects. It waited 3 min for a GPU.'
    ]);
  });

  it('says a kernel is suspended, offering Resume in place, and the resume replaces it', async () => {
    // Given a running kernel (the page's first poll: history)
    await poll([makeSession({ state: 'active', device: 'gpu' })]);
    // When the server suspends it
    await poll(
      [makeSuspended('writing')],
      [
        event('suspended', {
          gpu_released_seconds: 0.9,
          host_bytes: 12_400_000_000,
          message: 'Suspended — GPU released in 0.9 s; writing checkpoint'
        })
      ]
    );
    // Then one calm toast says the GPU is released and the variables stay
    expect(toasts.map(t => [t.type, t.message])).toEqual([
      [
        'info',
        'Suspended train.ipynb: GPU released in 0.9 s; every variable stays in the kernel (12.4 GB of host memory) while its checkpoint is written.'
      ]
    ]);
    // And its Resume resumes the session in place
    const [resume] = toasts[0].options.actions! as any[];
    expect(resume.label).toBe('Resume');
    expect(resume.caption).toBe(
      'Resume in place: the same kernel, back on a GPU'
    );
    resume.callback();
    expect(executed).toEqual([[CommandIDs.resume, { sessionId: 's1' }]]);
    // When the resume brings it back in place
    const later = new Date(Date.now() + 1000).toISOString();
    await poll(
      [makeSession({ state: 'active', device: 'gpu' })],
      [
        {
          ...event('resumed', {
            in_place: true,
            device: 'gpu',
            message: 'CUDA state restored on GPU 0'
          }),
          time: later
        }
      ]
    );
    // Then its toast says so and replaces the suspend's
    expect(toasts[1].message).toBe(
      'Resumed train.ipynb in place: the same kernel, every variable as it was.'
    );
    expect(dismiss).toHaveBeenCalledWith(toasts[0].id);
  });

  it('warns, not errs, when the checkpoint behind a suspended kernel fails, offering Resume', async () => {
    // Given a suspended kernel writing its checkpoint (the first poll: history)
    await poll([makeSuspended('writing')]);
    // When the write fails: the server keeps it suspended and says why
    await poll(
      [makeSuspended('failed')],
      [
        event('pause_failed', {
          error_reason: 'store-full',
          message: makeSuspended('failed').message!
        })
      ]
    );
    // Then one warning says first that every variable is still there
    expect(toasts.map(t => [t.type, t.message])).toEqual([
      [
        'warning',
        'train.ipynb is still suspended with every variable in its kernel; Resume brings it back in place. Checkpoint not written: the store is full (0 B free of 6.1 GB needed).'
      ]
    ]);
    // And its Resume resumes in place
    const [resume] = toasts[0].options.actions! as any[];
    expect([resume.label, resume.caption]).toEqual([
      'Resume',
      'Resume in place: the same kernel, back on a GPU'
    ]);
    resume.callback();
    expect(executed).toEqual([[CommandIDs.resume, { sessionId: 's1' }]]);
  });
});

describe('the sentences of the suspend toasts', () => {
  it('is an event type of the Lab: `suspended`', () => {
    // (a compile error here when the union loses it)
    const type: EventType = 'suspended';
    expect(type).toBe('suspended');
  });

  it('says the GPU is released and every variable stays in the kernel', () => {
    const suspended = event('suspended', {
      gpu_released_seconds: 0.9,
      host_bytes: 12_400_000_000,
      message: 'Suspended — GPU released in 0.9 s; writing checkpoint'
    });
    expect(suspendedEventText('train.ipynb', suspended, trans)).toBe(
      'Suspended train.ipynb: GPU released in 0.9 s; every variable stays in the kernel (12.4 GB of host memory) while its checkpoint is written.'
    );
    // And without the numbers (a server that did not measure them)
    expect(suspendedEventText('train.ipynb', event('suspended'), trans)).toBe(
      'Suspended train.ipynb: GPU released; every variable stays in the kernel while its checkpoint is written.'
    );
  });

  it('says a resume of a suspended kernel was in place', () => {
    const resumed = event('resumed', {
      in_place: true,
      device: 'gpu',
      waited_seconds: 120,
      message: 'CUDA state restored on GPU 0 in 1.2 s'
    });
    expect(resumedText('train.ipynb', resumed, trans as any)).toBe(
      'Resumed train.ipynb in place: the same kernel, every variable as it was. It waited 2 min for a GPU.'
    );
  });

  it('says first, when a checkpoint fails behind a suspended kernel, that every variable is still there', () => {
    const text = pauseFailedText(
      'train.ipynb',
      makeSuspended('failed'),
      '',
      trans as any
    );
    expect(text).toBe(
      'train.ipynb is still suspended with every variable in its kernel; Resume brings it back in place. Checkpoint not written: the store is full (0 B free of 6.1 GB needed).'
    );
  });
});
