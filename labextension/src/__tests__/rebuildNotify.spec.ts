/**
 * @jest-environment ./src/__tests__/jsdom-env.js
 */
/**
 * A resume that left variables behind says which, and exactly which cells
 * would make them again, with "Re-run cells"; each rebuild's outcome
 * replaces that toast. A rebuild the server ran by itself is told, never
 * offered.
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
import { CommandRegistry } from '@lumino/commands';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import { SessionsModel } from '../model';
import { RebuildNotifier } from '../rebuild/notify';
import { CommandIDs, IEvent, IRebuildPlan, ISession } from '../tokens';
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
const dismiss = Notification.dismiss as jest.Mock;

const PLAN: IRebuildPlan = {
  names: ['batches', 'h'],
  cells: [
    { execution_count: 3, seconds: 0.001, code: "model = {'w': 0}" },
    { execution_count: 4, seconds: 0.002, code: 'batches = (b for b in data)' },
    { execution_count: 5, seconds: 0.0, code: "h = hashlib.sha256(b'abc')" }
  ],
  seconds: 0.003,
  unbuildable: [],
  text: '`batches`, `h`: re-run cells [3], [4], [5] — 0.0 s',
  problem: null
};

let clock = Date.parse('2026-12-02T10:00:00Z');

function event(
  type: string,
  detail: IEvent['detail'] = {},
  reason = 'user'
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

function resumed(plan: IRebuildPlan | null = PLAN): IEvent {
  return event('resumed', { message: 'Restored 3 objects', rebuild: plan });
}

function rebuilt(reason = 'user'): IEvent {
  return event(
    'rebuilt',
    {
      names: ['batches', 'h'],
      cells: PLAN.cells.map(c => ({
        execution_count: c.execution_count,
        seconds: c.seconds
      })),
      seconds: 0.012,
      copy_bytes: 0
    },
    reason
  );
}

/** A session resumed with the plan on offer. */
function offering(overrides: Partial<ISession> = {}): ISession {
  return makeSession({
    restore: {
      restored: ['data', 'hashlib', 'model'],
      failed: [],
      rebuild: PLAN
    },
    ...overrides
  });
}

describe('RebuildNotifier', () => {
  let model: SessionsModel;
  let commands: CommandRegistry;
  let notifier: RebuildNotifier;
  let executed: [string, ReadonlyPartialJSONObject][];
  let answer: { sessions: ISession[]; events: IEvent[] };

  /** One poll of the server answering these sessions and new events. */
  async function poll(sessions: ISession[], events: IEvent[] = []) {
    answer = { sessions, events };
    await model.fetch();
  }

  beforeEach(async () => {
    toasts.length = 0;
    dismiss.mockClear();
    executed = [];
    commands = new CommandRegistry();
    for (const id of [CommandIDs.rebuild, CommandIDs.openPanel]) {
      commands.addCommand(id, {
        execute: args => void executed.push([id, args])
      });
    }
    model = new SessionsModel({
      api: {
        listSessions: async () => answer.sessions,
        events: async () => answer.events
      },
      refreshInterval: 5
    });
    notifier = new RebuildNotifier({ model, commands, trans });
    // The page's first poll: a paused session (history, not news)
    await poll([makeSession({ state: 'paused', kernel_id: null })]);
  });

  afterEach(() => {
    notifier.dispose();
    model.dispose();
  });

  it('offers the plan after a resume, and its button re-runs the cells', async () => {
    // When the resume brings the session back without `batches` and `h`
    await poll([offering()], [resumed()]);
    // Then one toast says what was not saved and which cells would run
    expect(toasts.map(t => [t.type, t.message])).toEqual([
      [
        'info',
        'train.ipynb: `batches`, `h` were not saved. Re-run cells [3], [4], [5] (0.0 s) to rebuild them.'
      ]
    ]);
    const [offer] = toasts;
    expect(offer.options.autoClose).toBe(false);
    // And its button shows each cell's first line before anything runs
    const [rerun, show] = offer.options.actions!;
    expect(rerun.label).toBe('Re-run cells');
    expect(rerun.caption).toBe(
      "Re-run, in this order:\n[3] model = {'w': 0}\n[4] batches = (b for b in data)\n[5] h = hashlib.sha256(b'abc')"
    );
    expect(show.label).toBe('Show cells');
    // When the user clicks it, the rebuild command runs on the session
    rerun.callback();
    expect(executed).toEqual([[CommandIDs.rebuild, { sessionId: 's1' }]]);
    // And the outcome replaces the offer
    await poll([makeSession()], [rebuilt()]);
    expect(toasts[1].type).toBe('success');
    expect(toasts[1].message).toBe(
      'Rebuilt `batches`, `h` in train.ipynb (re-ran cells [3], [4], [5] in 0.01 s).'
    );
    expect(dismiss).toHaveBeenCalledWith(offer.id);
  });

  it('never offers what the server rebuilt by itself, and says what it rebuilt', async () => {
    // When the resume and the automatic rebuild arrive in one burst
    await poll([makeSession()], [resumed(), rebuilt('auto')]);
    // Then there is no button: only what was rebuilt, said to be automatic
    expect(toasts.map(t => [t.type, t.message])).toEqual([
      [
        'success',
        'Rebuilt `batches`, `h` in train.ipynb automatically (re-ran cells [3], [4], [5] in 0.01 s).'
      ]
    ]);
    expect(toasts[0].options.actions).toBeUndefined();
  });

  it('says a rebuild runs, without a button, when the server already started it', async () => {
    const rebuilding = offering({
      progress: {
        phase: 'rebuilding',
        done_bytes: 0,
        total_bytes: 3,
        unit: 'cells'
      }
    });
    await poll([rebuilding], [resumed()]);
    expect(toasts.map(t => t.message)).toEqual([
      'Rebuilding `batches`, `h` in train.ipynb: re-running cells [3], [4], [5]…'
    ]);
    expect(toasts[0].options.actions).toBeUndefined();
    // And the automatic rebuild's outcome replaces it
    await poll([makeSession()], [rebuilt('auto')]);
    expect(dismiss).toHaveBeenCalledWith(toasts[0].id);
  });

  it('lists what cannot be rebuilt, with why, and offers nothing when nothing can', async () => {
    const plan: IRebuildPlan = {
      names: [],
      cells: [],
      seconds: 0,
      unbuildable: [{ name: 'g1', reason: 'its cell is marked gp-no-rerun' }],
      text: null,
      problem: null
    };
    await poll([makeSession()], [resumed(plan)]);
    expect(toasts.map(t => t.message)).toEqual([
      'train.ipynb: `g1` did not come back and cannot be rebuilt. Cannot rebuild `g1`: its cell is marked gp-no-rerun.'
    ]);
    expect(toasts[0].options.actions).toBeUndefined();
  });

  it('is silent after a resume that brought everything back', async () => {
    await poll([makeSession()], [resumed(null)]);
    expect(toasts).toEqual([]);
  });

  it('names the failing cell and says nothing was changed', async () => {
    await poll([offering()], [resumed()]);
    await poll(
      [offering()],
      [
        event('rebuild_failed', {
          error_reason: 'cell-failed',
          failed: {
            execution_count: 4,
            code: 'batches = (b for b in data)',
            error: "NameError: name 'data' is not defined"
          }
        })
      ]
    );
    expect(toasts[1].type).toBe('error');
    expect(toasts[1].message).toBe(
      "Rebuild in train.ipynb changed nothing: cell [4] `batches = (b for b in data)` failed with NameError: name 'data' is not defined."
    );
    expect(toasts[1].options.autoClose).toBe(false);
  });

  it('warns what a re-run would share, and "Re-run anyway" confirms', async () => {
    await poll([offering()], [resumed()]);
    await poll(
      [offering()],
      [
        event('rebuild_failed', {
          error_reason: 'needs-confirm',
          shared: [
            { name: 'model', reason: 'copying it gives back the same object' }
          ],
          plan: PLAN
        })
      ]
    );
    const warning = toasts[1];
    expect(warning.type).toBe('warning');
    expect(warning.message).toBe(
      'Rebuild in train.ipynb ran nothing: re-running cells [3], [4], [5] could change what was restored: `model` (copying it gives back the same object).'
    );
    const [anyway] = warning.options.actions!;
    expect(anyway.label).toBe('Re-run anyway');
    anyway.callback();
    expect(executed).toEqual([
      [CommandIDs.rebuild, { sessionId: 's1', confirm: true }]
    ]);
  });

  it('withdraws a stale offer when the session is paused again', async () => {
    await poll([offering()], [resumed()]);
    await poll(
      [makeSession({ state: 'paused', kernel_id: null })],
      [event('paused', { bytes: 1000 })]
    );
    expect(dismiss).toHaveBeenCalledWith(toasts[0].id);
    expect(toasts).toHaveLength(1);
  });
});
