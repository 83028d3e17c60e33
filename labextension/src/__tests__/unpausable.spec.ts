/**
 * @jest-environment ./src/__tests__/jsdom-env.js
 */
/**
 * A session whose kernel cannot be paused (a bash kernel, a Python whose
 * agent cannot run) says so plainly: its panel row reads "Cannot be paused:
 * <why>" and offers no pause, and the user gets one notification when the
 * server finds it out, however often the event is seen again.
 *
 * The real sessions model polls a scripted server; JupyterLab's toast
 * module, an ES module Jest does not load, records the toasts instead.
 */

jest.mock('@jupyterlab/apputils', () =>
  jest
    .requireActual<typeof import('./apputilsStub')>('./apputilsStub')
    .apputilsStub()
);

import { Notification } from '@jupyterlab/apputils';

import { primaryCommand, sessionActions } from '../actions';
import { SessionsModel } from '../model';
import { CommandIDs, IEvent, ISession } from '../tokens';
import { UnpausableNotifier } from '../unpausable/notify';
import { cannotPauseText } from '../unpausable/text';
import { SessionRow } from '../widgets/row';
import { makeSession } from './sessions';
import { trans } from './translation';
import { visibleButtons, visibleLines } from './visible';

/** What the toast stand-in recorded. */
interface IToast {
  id: string;
  type: string;
  message: string;
  options: { autoClose?: number | false };
}

const toasts = (Notification as any).toasts as IToast[];
const NOW = Date.parse('2026-12-02T10:00:00Z');
const WHY = 'pause is not supported for bash kernels';

function bash(overrides: Partial<ISession> = {}): ISession {
  return makeSession({
    path: 'ops/shell.ipynb',
    kernel_name: 'bash-gpu',
    state: 'idle',
    idle_seconds: 30,
    pausable: { ok: false, reason: 'unsupported-kernel', message: WHY },
    ...overrides
  });
}

function unpausableEvent(sessionId = 's1'): IEvent {
  return {
    time: '2026-12-02T09:59:00Z',
    session_id: sessionId,
    type: 'unpausable',
    reason: 'kernel',
    detail: {
      error_reason: 'unsupported-kernel',
      pausable: { ok: false, reason: 'unsupported-kernel', message: WHY },
      message: `ops/shell.ipynb cannot be paused: ${WHY}. Its GPU is not given back by pausing`
    }
  };
}

describe('a session that cannot be paused', () => {
  it('says so in its row and offers no pause', () => {
    // Given a bash session the server knows cannot be paused
    const session = bash();
    const row = new SessionRow(
      session,
      { run: () => undefined, open: () => undefined },
      trans
    );
    // When the panel renders it
    row.update(session, NOW);
    // Then the row reads why, plainly, and has no Pause button
    const node = row.node as unknown as HTMLElement;
    expect(visibleLines(node)).toContain(`Cannot be paused: ${WHY}`);
    expect(visibleButtons(node).map(b => b.textContent)).not.toContain('Pause');
    expect(sessionActions(session)).not.toContain(CommandIDs.pause);
    expect(primaryCommand(session)).toBeNull();
  });

  it('counts down to a shutdown, not a pause, when a policy will cull it', () => {
    // Given a bash session that a policy will shut down in 90 s
    const at = new Date(NOW + 90_000).toISOString();
    const session = bash({ pause_at: at, policy: 'gpu' });
    const row = new SessionRow(
      session,
      { run: () => undefined, open: () => undefined },
      trans
    );
    row.update(session, NOW);
    // Then the row says it shuts down, and the user may still keep it running
    const text = visibleLines(row.node as unknown as HTMLElement).join('\n');
    expect(text).toContain('shuts down in');
    expect(text).not.toContain('pauses in');
    expect(sessionActions(session)).toEqual([CommandIDs.keepRunning]);
  });

  it('reads as any session while pausable or not known yet', () => {
    expect(cannotPauseText(makeSession(), trans)).toBe('');
    expect(
      cannotPauseText(makeSession({ pausable: { ok: true } }), trans)
    ).toBe('');
    expect(primaryCommand(makeSession({ pausable: { ok: true } }))).toBe(
      CommandIDs.pause
    );
  });
});

describe('UnpausableNotifier', () => {
  let model: SessionsModel;
  let notifier: UnpausableNotifier;
  let answer: IEvent[];

  async function poll(events: IEvent[] = []): Promise<void> {
    answer = events;
    await model.fetch();
  }

  beforeEach(async () => {
    toasts.length = 0;
    answer = [];
    model = new SessionsModel({
      api: { listSessions: async () => [bash()], events: async () => answer },
      refreshInterval: 5
    });
    notifier = new UnpausableNotifier({ model, trans });
    await poll(); // the page's first poll: history
  });

  afterEach(() => {
    notifier.dispose();
    model.dispose();
  });

  it('tells the user once when a session becomes unpausable', async () => {
    // When the server records that the session cannot be paused
    await poll([unpausableEvent()]);
    // Then one warning says why and what it means for the GPU, and stays
    expect(toasts.map(t => t.type)).toEqual(['warning']);
    expect(toasts[0].message).toBe(
      `shell.ipynb cannot be paused: ${WHY}. Its GPU is not given back by pausing: shut its kernel down when you are done with it.`
    );
    expect(toasts[0].options.autoClose).toBe(false);
    // When the same news comes again (another poll, another tab's catch-up)
    await poll([unpausableEvent()]);
    // Then it is not told twice; another session's is told
    expect(toasts).toHaveLength(1);
    await poll([unpausableEvent('s2')]);
    expect(toasts).toHaveLength(2);
  });
});
