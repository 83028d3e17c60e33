/**
 * @jest-environment ./src/__tests__/jsdom-env.js
 */
/**
 * The kernel's ambient state (random generators, plotting settings,
 * IPython's extensions…) reaches the user twice: before a manual pause, the
 * dialog names what will not continue after the resume (a running thread, a
 * child process…) with why; after the resume, its toast gives the kernel's
 * sentence of what came back and names what did not, with why. An older
 * server (no `ambient`) changes nothing.
 *
 * The real commands, REST client, sessions model and notifier run; only
 * the HTTP layer answers canned responses, and JupyterLab's dialog and
 * toast modules, ES modules Jest does not load, are stand-ins.
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

import { Notification, showDialog } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { CommandRegistry } from '@lumino/commands';
import { IDisposable } from '@lumino/disposable';
import { Widget } from '@lumino/widgets';

import { ambientRestoreText } from '../ambient/text';
import { GpuPauseAPI } from '../api';
import { addCommands } from '../commands';
import { SessionsModel } from '../model';
import { EventNotifier } from '../session/notify';
import { resumedAmbient, resumedText } from '../session/text';
import {
  CommandIDs,
  DEFAULT_SETTINGS,
  ICheckReport,
  IEvent,
  IRestoreAmbient,
  ISession
} from '../tokens';
import { SessionRow } from '../widgets/row';
import { makeSession } from './sessions';
import { trans } from './translation';

/** What the toast stand-in recorded. */
interface IToast {
  id: string;
  type: string;
  message: string;
  options: {
    autoClose?: number | false;
    actions?: { label: string; caption?: string; callback: () => void }[];
  };
}

const toasts = (Notification as any).toasts as IToast[];
const makeRequest = ServerConnection.makeRequest as unknown as jest.Mock;

const THREAD_REASON =
  'a running thread cannot travel; it is not running after the resume';

/** What a resume of a seeded, plotted notebook with a worker thread did. */
const AMBIENT: IRestoreAmbient = {
  restored: ['random state', 'matplotlib settings', 'extensions'],
  rerun: ['display formatters'],
  not_restored: [{ name: 'thread worker-1', reason: THREAD_REASON }],
  text: 'Random state, plotting settings and 2 extensions restored; 1 cell re-run for display formatters'
};

function resumed(detail: IEvent['detail'] = {}): IEvent {
  return {
    time: new Date().toISOString(),
    session_id: 's1',
    type: 'resumed',
    reason: 'user',
    detail: {
      message: 'Restored 4 objects from checkpoint c1',
      checkpoint_id: 'c1',
      device: 'gpu',
      ...detail
    }
  };
}

describe('the ambient state in sentences', () => {
  it("gives the kernel's sentence, then what was not restored with why", () => {
    expect(ambientRestoreText(AMBIENT, trans)).toBe(
      'Random state, plotting settings and 2 extensions restored; 1 cell re-run for display formatters. ' +
        `Not restored: thread worker-1 (${THREAD_REASON}).`
    );
  });

  it.each([
    { desc: 'absent', ambient: undefined },
    { desc: 'null', ambient: null },
    {
      desc: 'empty',
      ambient: { restored: [], rerun: [], not_restored: [], text: null }
    }
  ])('says nothing when the ambient state is $desc', ({ ambient }) => {
    expect(ambientRestoreText(ambient, trans)).toBe('');
  });

  it('names what was not restored even without a sentence from the kernel', () => {
    const ambient: IRestoreAmbient = {
      restored: [],
      rerun: [],
      not_restored: [
        {
          name: 'child process 1234 (python)',
          reason: 'a process cannot travel.'
        },
        { name: 'connection 10.0.0.1:5432', reason: 'a connection is closed' }
      ],
      text: null
    };
    expect(ambientRestoreText(ambient, trans)).toBe(
      'Not restored: child process 1234 (python) (a process cannot travel); connection 10.0.0.1:5432 (a connection is closed).'
    );
  });

  it('adds the sentence to the resume toast, before how long it waited', () => {
    const event = resumed({ waited_seconds: 180 });
    expect(resumedText('train.ipynb', event, trans, AMBIENT)).toBe(
      'Resumed train.ipynb. Restored 4 objects. ' +
        'Random state, plotting settings and 2 extensions restored; 1 cell re-run for display formatters. ' +
        `Not restored: thread worker-1 (${THREAD_REASON}). ` +
        'It waited 3 min for a GPU.'
    );
  });

  it("gives the checkpoint's id up only when the toast would be cut", () => {
    // Given a short sentence: the whole fits in a toast's 140 characters
    const short = {
      ...AMBIENT,
      not_restored: [],
      text: 'Random state restored'
    };
    expect(resumedText('train.ipynb', resumed(), trans, short)).toBe(
      'Resumed train.ipynb. Restored 4 objects from checkpoint c1. Random state restored.'
    );
    // And a long one: the id goes, what came back stays in view
    const id = '20261205T234318Z-20f2a3bb';
    const long = resumed({
      checkpoint_id: id,
      message: `Restored 4 objects from checkpoint ${id}`
    });
    const text = resumedText('train.ipynb', long, trans, {
      ...short,
      text: 'Random state, plotting settings and 2 extensions restored'
    });
    expect(text).toBe(
      'Resumed train.ipynb. Restored 4 objects. Random state, plotting settings and 2 extensions restored.'
    );
    expect(text.length).toBeLessThanOrEqual(140);
  });

  it('leaves the resume toast as it was without the ambient state', () => {
    expect(resumedText('train.ipynb', resumed(), trans)).toBe(
      'Resumed train.ipynb. Restored 4 objects from checkpoint c1.'
    );
    expect(resumedText('train.ipynb', resumed(), trans, null)).toBe(
      'Resumed train.ipynb. Restored 4 objects from checkpoint c1.'
    );
  });

  it("does not say the kernel's sentence twice when the server's message has it", () => {
    const event = resumed({
      message: `Restored 4 objects from checkpoint c1; ${AMBIENT.text}`
    });
    const ambient = { ...AMBIENT, not_restored: [] };
    expect(resumedText('train.ipynb', event, trans, ambient)).toBe(
      `Resumed train.ipynb. Restored 4 objects; ${AMBIENT.text}.`
    );
  });

  it("says the server's ambient part of its message once, with the reasons", () => {
    // Given the server's message as it ends: the ambient sentence, the names
    // not restored, then the rebuild plan (a toast of its own)
    const plan = {
      names: ['h'],
      cells: [{ execution_count: 2, seconds: 0 }],
      seconds: 0,
      unbuildable: [],
      text: '`h`: re-run cell [2] — 0.0 s'
    };
    const event = resumed({
      message:
        'Restored 4 objects from checkpoint c1; not restored: h. ' +
        `${AMBIENT.text}: thread worker-1. Rebuild ${plan.text}`,
      rebuild: plan
    });
    // Then the toast says the sentence once and the thread with why
    expect(resumedText('train.ipynb', event, trans, AMBIENT)).toBe(
      'Resumed train.ipynb. Restored 4 objects; not restored: h. ' +
        `${AMBIENT.text}. Not restored: thread worker-1 (${THREAD_REASON}).`
    );
  });

  it("takes the event's ambient state, else the same resume's report", () => {
    const report = makeSession({
      restore: {
        checkpoint_id: 'c1',
        restored: ['x'],
        failed: [],
        ambient: AMBIENT
      }
    });
    // The event's own wins, even when it says there is none
    expect(resumedAmbient(resumed({ ambient: null }), report)).toBeNull();
    const own = { ...AMBIENT, text: 'Random state restored' };
    expect(resumedAmbient(resumed({ ambient: own }), report)).toBe(own);
    // Else the session's report of the same checkpoint
    expect(resumedAmbient(resumed(), report)).toBe(AMBIENT);
    // Not a report of an earlier resume, nor one from an older server
    expect(resumedAmbient(resumed({ checkpoint_id: 'c2' }), report)).toBeNull();
    expect(
      resumedAmbient(
        resumed(),
        makeSession({
          restore: { checkpoint_id: 'c1', restored: ['x'], failed: [] }
        })
      )
    ).toBeNull();
    expect(resumedAmbient(resumed(), null)).toBeNull();
  });
});

describe('the resume toast', () => {
  let model: SessionsModel;
  let commands: CommandRegistry;
  let notifier: EventNotifier;
  let opened: number;
  let answer: { sessions: ISession[]; events: IEvent[] };

  async function poll(sessions: ISession[], events: IEvent[] = []) {
    answer = { sessions, events };
    await model.fetch();
  }

  beforeEach(() => {
    toasts.length = 0;
    opened = 0;
    commands = new CommandRegistry();
    commands.addCommand(CommandIDs.openPanel, { execute: () => void opened++ });
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

  it('says what came back of the ambient state and what did not, with why', async () => {
    // Given a session being restored (the page's first poll: history)
    await poll([makeSession({ state: 'restoring' })]);
    // When it resumes, its report listing the ambient state
    await poll(
      [
        makeSession({
          restore: {
            checkpoint_id: 'c1',
            restored: ['x'],
            failed: [],
            ambient: AMBIENT
          }
        })
      ],
      [resumed()]
    );
    // Then the toast gives the kernel's sentence and the thread with why
    expect(toasts.map(t => [t.type, t.message])).toEqual([
      [
        'success',
        'Resumed train.ipynb. Restored 4 objects. ' +
          'Random state, plotting settings and 2 extensions restored; 1 cell re-run for display formatters. ' +
          `Not restored: thread worker-1 (${THREAD_REASON}).`
      ]
    ]);
    // And it stays a while, "Show details" listing them and opening the panel
    const [toast] = toasts;
    expect(toast.options.autoClose).toBe(15000);
    const [details] = toast.options.actions!;
    expect(details.label).toBe('Show details');
    expect(details.caption).toBe(
      `Not restored:\nthread worker-1: ${THREAD_REASON}`
    );
    details.callback();
    expect(opened).toBe(1);
  });

  it('names after a pause what will not continue after the resume', async () => {
    await poll([makeSession({ state: 'pausing' })]);
    await poll(
      [makeSession({ state: 'paused', kernel_id: null })],
      [
        {
          ...resumed(),
          type: 'paused',
          detail: {
            bytes: 12_000,
            skipped: [],
            not_carried: [{ name: 'thread worker-1', reason: THREAD_REASON }]
          }
        }
      ]
    );
    expect(toasts.map(t => t.message)).toEqual([
      'Paused train.ipynb: 12.0 kB saved, GPU released. Will not continue after the resume: thread worker-1.'
    ]);
  });

  it('tells a resume from an older server as before', async () => {
    await poll([makeSession({ state: 'restoring' })]);
    await poll(
      [
        makeSession({
          restore: { checkpoint_id: 'c1', restored: ['x'], failed: [] }
        })
      ],
      [resumed()]
    );
    expect(toasts.map(t => t.message)).toEqual([
      'Resumed train.ipynb. Restored 4 objects from checkpoint c1.'
    ]);
    expect(toasts[0].options.autoClose).toBe(6000);
    expect(toasts[0].options.actions).toEqual([]);
  });
});

describe('the panel row of a resumed session', () => {
  it('adds the ambient sentence and what was not restored to what came back', () => {
    const session = makeSession({
      restore: {
        checkpoint_id: 'c1',
        restored: ['x', 'y'],
        failed: [],
        ambient: AMBIENT
      }
    });
    const row = new SessionRow(
      session,
      { run: () => undefined, open: () => undefined },
      trans
    );
    expect(row.node.querySelector('.jp-GpuPause-message')!.textContent).toBe(
      'Restored 2 objects: x, y. ' +
        'Random state, plotting settings and 2 extensions restored; 1 cell re-run for display formatters. ' +
        `Not restored: thread worker-1 (${THREAD_REASON}).`
    );
  });
});

/** The fields of a dry run the pause dialog does not read. */
const CHECKED: Pick<
  ICheckReport,
  'registered' | 'bytes' | 'error' | 'unverified'
> = { registered: [], bytes: 0, error: null, unverified: null };

describe('the pause dialog', () => {
  let commands: CommandRegistry;
  let model: SessionsModel;
  let registered: IDisposable;
  let check: ICheckReport;
  let confirm: boolean;

  beforeEach(async () => {
    (showDialog as jest.Mock).mockReset();
    (showDialog as jest.Mock).mockResolvedValue({ button: { accept: false } });
    makeRequest.mockReset();
    makeRequest.mockImplementation(async (url: string) =>
      url.endsWith('/check')
        ? new Response(JSON.stringify(check))
        : new Response(JSON.stringify(makeSession()), { status: 202 })
    );
    confirm = true;
    commands = new CommandRegistry();
    model = new SessionsModel({
      api: {
        listSessions: async () => [makeSession()],
        events: async () => []
      },
      refreshInterval: 5
    });
    await model.fetch();
    registered = addCommands(
      { commands },
      {
        api: new GpuPauseAPI(),
        model,
        settings: () => ({ ...DEFAULT_SETTINGS, confirmBeforePause: confirm }),
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

  /** The dialog the pause command showed: its title and body. */
  function dialog(): { title: string; body: HTMLElement; buttons: any[] } {
    expect(showDialog).toHaveBeenCalledTimes(1);
    const options = (showDialog as jest.Mock).mock.calls[0][0];
    return {
      title: options.title,
      body: (options.body as Widget).node,
      buttons: options.buttons
    };
  }

  it('lists what will not continue after the resume, with why', async () => {
    // Given a kernel whose every variable can be saved, but a worker thread
    // runs and a database connection is open; and a user who asked not to
    // confirm pauses
    confirm = false;
    check = {
      ...CHECKED,
      objects: [{ name: 'x', bytes: 8, required: false }],
      skipped: [],
      ambient: {
        carried: ['random state'],
        not_carried: [
          { name: 'thread worker-1', reason: THREAD_REASON },
          {
            name: 'connection 10.0.0.1:5432',
            reason:
              'an open connection cannot travel; reconnect after the resume'
          }
        ]
      }
    };
    // When the user pauses
    await commands.execute(CommandIDs.pause, { sessionId: 's1' });
    // Then the dialog asks all the same, naming each with its reason
    const { title, body, buttons } = dialog();
    expect(title).toBe('Some state will not continue after the resume');
    expect(
      body.querySelector('.jp-GpuPause-notCarriedHeading')!.textContent
    ).toBe('Will not continue after the resume:');
    const items = [...body.querySelectorAll('.jp-GpuPause-notCarried li')];
    expect(items.map(li => li.textContent)).toEqual([
      `thread worker-1 — ${THREAD_REASON}`,
      'connection 10.0.0.1:5432 — an open connection cannot travel; reconnect after the resume'
    ]);
    expect(items[0].querySelector('code')!.textContent).toBe('thread worker-1');
    expect(buttons.map(b => b.label)).toEqual(['Cancel', 'Pause anyway']);
    // And cancelling it pauses nothing
    const posted = makeRequest.mock.calls.map(([url]) => new URL(url).pathname);
    expect(posted).toEqual(['/gpu-pause/api/sessions/s1/check']);
  });

  it('lists unsaved variables and what will not continue, each under its heading', async () => {
    check = {
      ...CHECKED,
      objects: [],
      skipped: [{ name: 'log', reason: 'an open file cannot be saved' }],
      ambient: {
        carried: [],
        not_carried: [{ name: 'thread worker-1', reason: THREAD_REASON }]
      }
    };
    await commands.execute(CommandIDs.pause, { sessionId: 's1' });
    const { title, body } = dialog();
    expect(title).toBe('Some variables cannot be saved');
    expect(
      [...body.querySelectorAll('p')].map(p => p.textContent).slice(1)
    ).toEqual([
      'These variables cannot be saved and will be lost:',
      'Will not continue after the resume:'
    ]);
    expect(body.querySelector('.jp-GpuPause-skipped')!.textContent).toBe(
      'log — an open file cannot be saved'
    );
    expect(body.querySelector('.jp-GpuPause-notCarried')!.textContent).toBe(
      `thread worker-1 — ${THREAD_REASON}`
    );
  });

  it.each([
    { desc: 'absent', ambient: undefined },
    { desc: 'null', ambient: null },
    { desc: 'empty', ambient: { carried: ['random state'], not_carried: [] } }
  ])(
    'shows nothing new when the ambient state is $desc',
    async ({ ambient }) => {
      check = {
        ...CHECKED,
        objects: [{ name: 'x', bytes: 8, required: false }],
        skipped: [],
        // absent from an older agent: off the contract, as such a server sends it
        ambient: ambient as ICheckReport['ambient']
      };
      await commands.execute(CommandIDs.pause, { sessionId: 's1' });
      const { title, body, buttons } = dialog();
      expect(title).toBe('Pause kernel?');
      expect(body.querySelector('.jp-GpuPause-notCarried')).toBeNull();
      expect(body.textContent).not.toContain('Will not continue');
      expect(buttons.map(b => b.label)).toEqual(['Cancel', 'Pause']);
    }
  );

  it('pauses without asking when nothing is lost and the user said so', async () => {
    confirm = false;
    check = {
      ...CHECKED,
      objects: [{ name: 'x', bytes: 8, required: false }],
      skipped: [],
      ambient: { carried: ['random state'], not_carried: [] }
    };
    await commands.execute(CommandIDs.pause, { sessionId: 's1' });
    expect(showDialog).not.toHaveBeenCalled();
    const posted = makeRequest.mock.calls.map(([url]) => new URL(url).pathname);
    expect(posted).toEqual([
      '/gpu-pause/api/sessions/s1/check',
      '/gpu-pause/api/sessions/s1/pause'
    ]);
  });
});
