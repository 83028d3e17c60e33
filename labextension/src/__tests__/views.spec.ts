/**
 * @jest-environment ./src/__tests__/jsdom-env.js
 */
/**
 * The notebook toolbar button and the status bar item say where a waiting
 * resume stands ("Waiting for GPU · #2"), and that a timed-out wait can be
 * resumed. Both are the real widgets in jsdom, fed by the real
 * sessions model polling a scripted server.
 */

jest.mock('@jupyterlab/apputils', () => ({
  Notification: {},
  Dialog: {},
  showDialog: jest.fn()
}));
jest.mock('@jupyterlab/services', () => ({
  ServerConnection: { makeSettings: () => ({ baseUrl: '/' }) }
}));
jest.mock('@jupyterlab/notebook', () => ({}));

import { CommandRegistry } from '@lumino/commands';
import { Signal } from '@lumino/signaling';

import { SessionsModel } from '../model';
import { CommandIDs, ISession } from '../tokens';
import { GpuPauseStatus } from '../widgets/statusbar';
import { NotebookStateButton } from '../widgets/toolbar';
import { makeCheckpoint, makeSession, makeWaiting } from './sessions';
import { trans } from './translation';

const PATH = 'exp/train.ipynb';

describe('toolbar and status bar', () => {
  let model: SessionsModel;
  let listed: ISession[];
  let commands: CommandRegistry;
  let executed: [string, unknown][];
  let toolbar: NotebookStateButton;
  let status: GpuPauseStatus;

  async function given(session: ISession): Promise<void> {
    listed = [session];
    await model.fetch();
  }

  beforeEach(() => {
    listed = [];
    executed = [];
    model = new SessionsModel({
      api: { listSessions: async () => listed, events: async () => [] },
      refreshInterval: 5
    });
    commands = new CommandRegistry();
    commands.addCommand(CommandIDs.cancel, {
      execute: args => void executed.push([CommandIDs.cancel, args])
    });
    const panel = {
      sessionContext: { path: PATH, sessionChanged: new Signal({}) },
      context: { localPath: PATH }
    };
    toolbar = new NotebookStateButton({
      panel: panel as any,
      model,
      commands,
      trans
    });
    status = new GpuPauseStatus({ model, commands, trans });
    status.path = PATH;
  });

  afterEach(() => {
    toolbar.dispose();
    status.dispose();
    model.dispose();
  });

  it('says "Waiting for GPU · #2" while a resume waits second in line', async () => {
    await given(makeWaiting('2026-12-02T09:57:00Z'));
    expect(toolbar.node.textContent).toBe('Waiting for GPU · #2');
    expect(status.node.textContent).toBe('Waiting for GPU · #2');
    // And the tooltips give the server's reason and what a click does
    expect(status.node.title).toBe(
      'Waiting for a GPU (#2 in line): the limit of 1 GPU session on this machine is in use\n' +
        'Click to leave the queue; the session stays paused.'
    );
    expect(toolbar.node.title).toBe(
      'Waiting for a GPU (#2 in line): the limit of 1 GPU session on this machine is in use\n' +
        'Leave the queue; the session stays paused.'
    );
    // A click leaves the queue
    (toolbar.node as any).click();
    expect(executed).toEqual([[CommandIDs.cancel, { sessionId: 's1' }]]);
  });

  it('says "Waiting for GPU" without a position', async () => {
    await given(makeWaiting('2026-12-02T09:57:00Z', { queue_position: null }));
    expect(toolbar.node.textContent).toBe('Waiting for GPU');
    expect(status.node.textContent).toBe('Waiting for GPU');
  });

  it('offers to resume a wait that timed out', async () => {
    await given(
      makeSession({
        state: 'failed',
        kernel_id: null,
        checkpoint: makeCheckpoint(6e9, 4e9),
        error: {
          reason: 'capacity-timeout',
          state_intact: true,
          message:
            'no GPU became free within 30 min; your checkpoint is intact — Resume to try again'
        }
      })
    );
    expect(toolbar.node.textContent).toBe('No GPU free — Resume');
    expect(status.node.textContent).toBe('No GPU became free');
  });

  it('says a kernel resumed on the CPU runs there', async () => {
    await given(makeSession({ state: 'active', device: 'cpu' }));
    expect(status.node.textContent).toBe('On CPU · active');
  });
});
