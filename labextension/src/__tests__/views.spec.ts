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
import {
  makeCheckpoint,
  makeSession,
  makeSuspended,
  makeWaiting
} from './sessions';
import { trans } from './translation';

const PATH = 'exp/train.ipynb';
// 14:05 today on the user's clock (the views read the real clock), in any
// time zone.
const AT_14_05 = new Date();
AT_14_05.setHours(14, 5, 0, 0);

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
    for (const id of [CommandIDs.cancel, CommandIDs.resume]) {
      commands.addCommand(id, {
        execute: args => void executed.push([id, args])
      });
    }
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

  it.each([
    [
      'writing',
      makeSuspended('writing'),
      'Suspended · writing 25% — Resume',
      'Suspended · writing checkpoint 25%',
      'Suspended — GPU released in 0.9 s; writing checkpoint'
    ],
    [
      'written and kept',
      makeSuspended('written', AT_14_05.toISOString()),
      'Suspended — Resume',
      'Suspended · kept until 14:05',
      'Suspended — checkpoint saved; the kernel is kept for a fast resume until 14:05'
    ],
    [
      'failed',
      makeSuspended('failed'),
      'Suspended, not saved — Resume',
      'Suspended · checkpoint not written',
      'Suspended — checkpoint not written: the store is full (0 B free of 6.1 GB needed). Every variable is still in the kernel; Resume brings it back in place'
    ]
  ])(
    'says a kernel suspended, %s, is suspended (not paused) and resumes it in place',
    async (phase, session, label, line, detail) => {
      // Given the notebook's kernel suspended in that phase
      await given(session);
      // Then the toolbar and the status bar say so, never "Paused"
      expect(toolbar.node.textContent).toBe(label);
      expect(status.node.textContent).toBe(line);
      expect(toolbar.node.dataset.state).toBe('suspended');
      expect(status.node.dataset.suspend).toBe(
        phase === 'written and kept' ? 'written' : phase
      );
      expect((toolbar.node as HTMLButtonElement).disabled).toBe(false);
      // And their tooltips give the sentence and what a click does
      expect(toolbar.node.title).toBe(
        `${detail}\nResume in place: the same kernel, back on a GPU`
      );
      expect(status.node.title).toBe(
        `${detail}\nClick to resume in place: the same kernel, back on a GPU.`
      );
      // And a click on either resumes the session
      (toolbar.node as any).click();
      (status.node as any).click();
      expect(executed).toEqual([
        [CommandIDs.resume, { sessionId: 's1' }],
        [CommandIDs.resume, { sessionId: 's1' }]
      ]);
    }
  );
});
