/**
 * @jest-environment ./src/__tests__/jsdom-env.js
 */
/**
 * The buttons of a waiting row reach the server: Cancel posts `cancel`,
 * "Resume on CPU now" posts `resume` with `{"device": "cpu"}`; and the
 * "Resume on CPU" command is offered only where it is a real choice.
 * Resume asks the server first and asks the user only when the server says
 * the notebook's kernel has run code (`kernel-exists`).
 *
 * The real commands, REST client and sessions model run; only the HTTP
 * layer (`ServerConnection.makeRequest`) answers canned responses, and
 * JupyterLab's dialog and toast modules, ES modules Jest does not load, are
 * stand-ins.
 */
import { visibleButtons } from './visible';

jest.mock('@jupyterlab/services', () => ({
  ServerConnection: {
    makeSettings: () => ({ baseUrl: 'http://localhost:8888/' }),
    makeRequest: jest.fn()
  }
}));
jest.mock('@jupyterlab/apputils', () => ({
  Notification: { warning: jest.fn(), error: jest.fn(), info: jest.fn() },
  Dialog: {
    cancelButton: (options: object) => ({ ...options, accept: false }),
    warnButton: (options: object) => ({ ...options, accept: true })
  },
  showDialog: jest.fn()
}));
jest.mock('@jupyterlab/notebook', () => ({}));

import { Notification, showDialog } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { CommandRegistry } from '@lumino/commands';
import { IDisposable } from '@lumino/disposable';

import { GpuPauseAPI } from '../api';
import { addCommands } from '../commands';
import { SessionsModel } from '../model';
import { CommandIDs, DEFAULT_SETTINGS, ISession } from '../tokens';
import { SessionRow } from '../widgets/row';
import {
  makeCheckpoint,
  makeSession,
  makeSuspended,
  makeWaiting
} from './sessions';
import { trans } from './translation';

const makeRequest = ServerConnection.makeRequest as unknown as jest.Mock;
const NOW = Date.parse('2026-12-02T10:00:00Z');

describe('session commands', () => {
  let commands: CommandRegistry;
  let model: SessionsModel;
  let registered: IDisposable;
  let listed: ISession[];

  /** The server knows these sessions; the model has polled them. */
  async function given(...sessions: ISession[]): Promise<void> {
    listed = sessions;
    await model.fetch();
  }

  /** The method, path and JSON body of each request the client sent. */
  function requests(): [string, string, unknown][] {
    return makeRequest.mock.calls.map(([url, init]) => [
      init.method,
      new URL(url).pathname,
      init.body ? JSON.parse(init.body) : undefined
    ]);
  }

  beforeEach(() => {
    makeRequest.mockReset();
    (showDialog as jest.Mock).mockReset();
    (Notification.error as jest.Mock).mockReset();
    makeRequest.mockImplementation(
      async () => new Response(JSON.stringify(listed[0]), { status: 202 })
    );
    commands = new CommandRegistry();
    listed = [];
    model = new SessionsModel({
      api: {
        listSessions: async () => listed,
        events: async () => []
      },
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
  });

  afterEach(() => {
    registered.dispose();
    model.dispose();
  });

  it('registers the command of every feature, and removes them on dispose', () => {
    // Given addCommands has run (beforeEach)
    const ids = Object.values(CommandIDs) as string[];
    // Then each feature's commands are there: the lifecycle's, the
    // rebuild's and the panel's
    expect(ids.filter(id => !commands.hasCommand(id))).toEqual([]);
    // When its result is disposed
    registered.dispose();
    // Then none is left
    expect(ids.filter(id => commands.hasCommand(id))).toEqual([]);
  });

  it("posts cancel and resume-on-CPU from a waiting row's buttons", async () => {
    // Given a resume waiting for a GPU, shown in the panel
    const waiting = makeWaiting('2026-12-02T09:57:00Z');
    await given(waiting);
    const row = new SessionRow(
      waiting,
      {
        run: (command, sessionId) =>
          void commands.execute(command, { sessionId }),
        open: () => undefined
      },
      trans
    );
    row.update(waiting, NOW);
    const [cancel, cpu] = visibleButtons(
      row.node as unknown as HTMLElement
    ).slice(1);
    // When the user clicks Cancel, then Resume on CPU now
    expect([cancel.textContent, cpu.textContent]).toEqual([
      'Cancel',
      'Resume on CPU now'
    ]);
    cancel.click();
    cpu.click();
    await new Promise(resolve => setTimeout(resolve, 0));
    // Then the server is asked to leave the queue, then to go on the CPU now
    expect(requests()).toEqual([
      ['POST', '/gpu-pause/api/sessions/s1/cancel', {}],
      ['POST', '/gpu-pause/api/sessions/s1/resume', { device: 'cpu' }]
    ]);
    expect(Notification.error).not.toHaveBeenCalled();
  });

  it('resumes a paused session on the CPU', async () => {
    await given(
      makeSession({
        state: 'paused',
        kernel_id: null,
        checkpoint: makeCheckpoint(6e9, 4e9)
      })
    );
    await commands.execute(CommandIDs.resumeCpu, { sessionId: 's1' });
    expect(requests()).toEqual([
      ['POST', '/gpu-pause/api/sessions/s1/resume', { device: 'cpu' }]
    ]);
  });

  it('resumes with one request and no dialog when the server takes the open kernel', async () => {
    // Given a paused notebook, opened again with a kernel that has run nothing
    await given(
      makeSession({ state: 'paused', kernel_id: null, open_kernel: 'k2' })
    );
    // When the user clicks Resume
    await commands.execute(CommandIDs.resume, { sessionId: 's1' });
    // Then one resume is posted, naming no kernel, and nobody is asked
    expect(requests()).toEqual([
      ['POST', '/gpu-pause/api/sessions/s1/resume', {}]
    ]);
    expect(showDialog).not.toHaveBeenCalled();
    expect(Notification.error).not.toHaveBeenCalled();
  });

  it.each([
    { desc: 'agrees', accept: true },
    { desc: 'cancels', accept: false }
  ])(
    'asks before restoring into a kernel that ran code, and the user $desc',
    async ({ accept }) => {
      // Given a paused notebook whose new kernel k2 has run code
      const paused = makeSession({ state: 'paused', kernel_id: null });
      const running = makeSession({ id: 's2', kernel_id: 'k2' });
      await given(paused, running);
      makeRequest.mockImplementation(async (url: string, init: RequestInit) => {
        if (init.method === 'GET') {
          return new Response(JSON.stringify({ sessions: [paused, running] }));
        }
        const body = JSON.parse(init.body as string);
        return body.into_kernel
          ? new Response(JSON.stringify(paused), { status: 202 })
          : new Response(
              JSON.stringify({
                message: 'exp/train.ipynb already has a running kernel (k2)',
                reason: 'kernel-exists'
              }),
              { status: 409 }
            );
      });
      (showDialog as jest.Mock).mockResolvedValue({ button: { accept } });
      // When the user clicks Resume
      await commands.execute(CommandIDs.resume, { sessionId: 's1' });
      // Then the server's refusal makes Lab ask, and only a yes restores into k2
      expect(showDialog).toHaveBeenCalledTimes(1);
      const resumes = requests().filter(([method]) => method === 'POST');
      expect(resumes).toEqual([
        ['POST', '/gpu-pause/api/sessions/s1/resume', {}],
        ...(accept
          ? [
              [
                'POST',
                '/gpu-pause/api/sessions/s1/resume',
                { into_kernel: 'k2' }
              ]
            ]
          : [])
      ]);
      expect(Notification.error).not.toHaveBeenCalled();
    }
  );

  it.each([
    { desc: 'paused, GPU tensors', state: 'paused', gpu: 4e9, offered: true },
    { desc: 'paused, no GPU tensors', state: 'paused', gpu: 0, offered: false },
    { desc: 'failed, GPU tensors', state: 'failed', gpu: 4e9, offered: true },
    { desc: 'failed, no GPU tensors', state: 'failed', gpu: 0, offered: false },
    {
      desc: 'waiting, no GPU tensors',
      state: 'waiting',
      gpu: 0,
      offered: true
    },
    { desc: 'running', state: 'active', gpu: 4e9, offered: false }
  ])(
    'offers Resume on CPU for a session $desc: $offered',
    async ({ state, gpu: gpuBytes, offered }) => {
      await given(
        makeSession({
          state: state as ISession['state'],
          checkpoint: makeCheckpoint(6e9, gpuBytes as number)
        })
      );
      const args = { sessionId: 's1' };
      expect(commands.label(CommandIDs.resumeCpu, args)).toBe('Resume on CPU');
      expect(commands.isEnabled(CommandIDs.resumeCpu, args)).toBe(offered);
      expect(commands.isVisible(CommandIDs.resumeCpu, args)).toBe(offered);
      // The plain Resume stays for every paused session
      if (state === 'paused') {
        expect(commands.isEnabled(CommandIDs.resume, args)).toBe(true);
      }
    }
  );

  it.each(['writing', 'written', 'failed'] as const)(
    'resumes a kernel suspended (%s) in place, with one request and no dialog; pause is off',
    async phase => {
      // Given a suspended kernel whose checkpoint holds GPU tensors
      await given(
        makeSuspended(phase, null, { checkpoint: makeCheckpoint(6e9, 4e9) })
      );
      const args = { sessionId: 's1' };
      // Then Resume is on, and says it resumes in place; Pause, the CPU and
      // Discard are off (the server answers a pause with 409)
      expect(commands.isEnabled(CommandIDs.resume, args)).toBe(true);
      expect(commands.label(CommandIDs.resume, args)).toBe(
        'Resume Suspended Kernel'
      );
      expect(commands.caption(CommandIDs.resume, args)).toBe(
        'Resume in place: the same kernel, back on a GPU'
      );
      expect(commands.isEnabled(CommandIDs.pause, args)).toBe(false);
      expect(commands.isEnabled(CommandIDs.resumeCpu, args)).toBe(false);
      expect(commands.isEnabled(CommandIDs.discard, args)).toBe(false);
      expect(commands.isEnabled(CommandIDs.cancel, args)).toBe(false);
      // When the user resumes it
      await commands.execute(CommandIDs.resume, args);
      // Then one resume is posted, naming no device and no kernel
      expect(requests()).toEqual([
        ['POST', '/gpu-pause/api/sessions/s1/resume', {}]
      ]);
      expect(showDialog).not.toHaveBeenCalled();
      expect(Notification.error).not.toHaveBeenCalled();
    }
  );

  it('keeps the paused wording of Resume for a paused session', async () => {
    await given(makeSession({ state: 'paused', kernel_id: null }));
    const args = { sessionId: 's1' };
    expect(commands.label(CommandIDs.resume, args)).toBe(
      'Resume Paused Kernel'
    );
    expect(commands.caption(CommandIDs.resume, args)).toBe(
      'Start a kernel and restore the saved state into it'
    );
  });
});
