/**
 * @jest-environment ./src/__tests__/jsdom-env.js
 */
/**
 * The kernel gate: a notebook that the server says is paused opens without
 * a kernel, offering Resume; any other notebook starts its kernel as
 * JupyterLab would, also when the server cannot answer.
 *
 * The gate runs for real; the notebook widget is a stand-in of JupyterLab's
 * (its session context: kernel preference, readiness, `startKernel`), and
 * JupyterLab's toast module, an ES module Jest does not load, is a stand-in.
 */
jest.mock('@jupyterlab/apputils', () => ({
  Notification: {
    info: jest.fn(() => 'toast-1'),
    dismiss: jest.fn(),
    warning: jest.fn(),
    error: jest.fn()
  },
  Dialog: {},
  showDialog: jest.fn()
}));
jest.mock('@jupyterlab/notebook', () => ({}));

import { Notification } from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { CommandRegistry } from '@lumino/commands';
import { Signal } from '@lumino/signaling';

import { KernelGate } from '../session/gate';
import { ISession } from '../tokens';
import { makeCheckpoint, makeSession, makeSuspended } from './sessions';
import { trans } from './translation';

const PATH = 'exp/train.ipynb';

/**
 * A notebook widget as the document manager creates it: its context not
 * initialized yet. `decide()` does what the context's initialization does
 * when it reads the preference: start a kernel if it should.
 */
function notebook(): {
  panel: NotebookPanel;
  context: any;
  decide: () => Promise<void>;
} {
  let resolveReady: () => void = () => undefined;
  const context: any = {
    path: PATH,
    kernelPreference: { shouldStart: true, canStart: true, name: 'python3' },
    isReady: false,
    session: null,
    ready: new Promise<void>(resolve => (resolveReady = resolve)),
    sessionChanged: new Signal<any, any>({}),
    // JupyterLab's session context starts a session under the path it was
    // made with, whatever the notebook is called by then
    startKernel: jest.fn(async () => {
      context.session = {
        kernel: { id: 'k-new' },
        path: context.path,
        name: context.path.split('/').pop(),
        setPath: jest.fn(async (p: string) => (context.session.path = p)),
        setName: jest.fn(async (n: string) => (context.session.name = n))
      };
      context.sessionChanged.emit(context.session);
      return false;
    })
  };
  const decide = async (): Promise<void> => {
    if (context.kernelPreference.shouldStart !== false) {
      await context.startKernel();
    }
    context.isReady = true;
    resolveReady();
  };
  const panel = {
    isDisposed: false,
    sessionContext: context,
    context: { path: PATH, localPath: PATH }
  } as unknown as NotebookPanel;
  return { panel, context, decide };
}

/** Let the gate's pending promises settle. */
const settle = (): Promise<void> =>
  new Promise(resolve => setTimeout(resolve, 0));

describe('KernelGate', () => {
  let listed: () => Promise<ISession[]>;
  let gate: KernelGate;
  let commands: CommandRegistry;

  beforeEach(() => {
    (Notification.info as jest.Mock).mockClear();
    (Notification.dismiss as jest.Mock).mockClear();
    commands = new CommandRegistry();
    gate = new KernelGate({
      api: { listSessions: () => listed() },
      commands,
      dialogs: null,
      trans
    });
  });

  it('opens a paused notebook without a kernel, offering Resume', async () => {
    // Given the server has the notebook paused
    listed = async () => [
      makeSession({
        path: PATH,
        state: 'paused',
        kernel_id: null,
        checkpoint: makeCheckpoint(100, 0)
      })
    ];
    const { panel, context, decide } = notebook();
    // When the notebook is opened and its context initializes
    gate.hold(panel);
    await settle();
    await decide();
    // Then no kernel starts, and the user is told and offered both ways on
    expect(context.startKernel).not.toHaveBeenCalled();
    expect(context.kernelPreference.shouldStart).toBe(false);
    expect(gate.heldAt(PATH)).toBe(panel);
    const [message, options] = (Notification.info as jest.Mock).mock.calls[0];
    expect(message).toContain('train.ipynb is paused');
    expect(options.actions.map((a: any) => a.label)).toEqual([
      'Resume',
      'Start a new kernel'
    ]);
    // When the user resumes (or starts a new kernel), the kernel starts
    await gate.release(panel);
    expect(context.startKernel).toHaveBeenCalledTimes(1);
    expect(gate.heldAt(PATH)).toBeNull();
    // And the notification, now out of date, goes
    expect(Notification.dismiss).toHaveBeenCalledWith('toast-1');
  });

  it('moves the session of a notebook renamed while held to its new name', async () => {
    // Given a new notebook the server knows nothing of, renamed while the
    // gate asked the server about it (Untitled.ipynb → exp/train.ipynb)
    let answer: (s: ISession[]) => void = () => undefined;
    listed = () => new Promise(resolve => (answer = resolve));
    const { panel, context, decide } = notebook();
    context.path = 'exp/Untitled.ipynb';
    gate.hold(panel);
    await settle();
    // When the server answers and the kernel starts
    answer([]);
    await settle();
    await decide();
    await settle();
    // Then its Jupyter session is under the notebook's current path and name
    expect(context.startKernel).toHaveBeenCalledTimes(1);
    expect(context.session.setPath).toHaveBeenCalledWith(PATH);
    expect(context.session.path).toBe(PATH);
    expect(context.session.name).toBe('train.ipynb');
  });

  const answers = {
    running: async () => [makeSession({ path: PATH, state: 'active' })],
    // Its kernel lives on with every variable: the notebook connects to it.
    suspended: async () => [
      makeSuspended('written', null, {
        path: PATH,
        checkpoint: makeCheckpoint(100, 0)
      })
    ],
    'unknown to the server': async () => [],
    'not answered': async (): Promise<ISession[]> => {
      throw new Error('offline');
    }
  };
  const cases: { desc: string; first: string }[] = [];
  for (const desc of Object.keys(answers)) {
    for (const first of ['the context decides', 'the server answers']) {
      cases.push({ desc, first });
    }
  }
  it.each(cases)(
    'starts the kernel of a notebook $desc, once ($first first)',
    async ({ desc, first }) => {
      listed = answers[desc as keyof typeof answers];
      const { panel, context, decide } = notebook();
      gate.hold(panel);
      if (first === 'the server answers') {
        await settle();
      }
      await decide();
      await settle();
      await settle();
      expect(context.startKernel).toHaveBeenCalledTimes(1);
      expect(context.kernelPreference.shouldStart).toBe(true);
      expect(gate.heldAt(PATH)).toBeNull();
      expect(Notification.info).not.toHaveBeenCalled();
    }
  );

  it('leaves alone a notebook whose context already has its kernel', async () => {
    listed = async () => [];
    const { panel, context } = notebook();
    context.isReady = true;
    context.session = { kernel: { id: 'k1' } };
    gate.hold(panel);
    await settle();
    expect(context.kernelPreference.shouldStart).toBe(true);
    expect(context.startKernel).not.toHaveBeenCalled();
  });
});
