/**
 * The session commands (pause, resume, resume on CPU, cancel, keep running,
 * discard, open panel, refresh). Each takes an optional session id or
 * notebook path and otherwise acts on the current notebook, so the palette,
 * the panel, the notebook toolbar, the status bar and the notifications
 * share one code path.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import type { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';
import { DisposableSet, IDisposable } from '@lumino/disposable';
import { Widget } from '@lumino/widgets';

import { isRebuilding, offersCpuResume } from './actions';
import type { KernelGate } from './gate';
import { GpuPauseAPI, GpuPauseError, KERNEL_EXISTS } from './api';
import { notifyBudgetRefusal } from './budgetNotify';
import { bytesText, durationText } from './format';
import { resumeInPlaceHint } from './suspendText';
import { SessionsModel } from './model';
import {
  CommandIDs,
  ICheckReport,
  IGpuPauseSettings,
  IPolicy,
  IResumeOptions,
  ISession,
  ISessionCommandArgs,
  ResumeDevice,
  SessionState
} from './tokens';

/**
 * What the commands need.
 */
export interface ICommandsOptions {
  /** The API client. */
  api: GpuPauseAPI;
  /** The application's command registry. */
  commands: CommandRegistry;
  /** Every tracked session. */
  model: SessionsModel;
  /** The settings in force; read at each run. */
  settings: () => Readonly<IGpuPauseSettings>;
  /** The notebook tracker, when notebooks are available. */
  tracker: INotebookTracker | null;
  /** What keeps paused notebooks from starting a kernel, when it runs. */
  gate?: KernelGate | null;
  /** Show the sessions panel. */
  openPanel: () => void;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
}

/**
 * States from which an action may start. An action on a session whose state
 * is not known yet is allowed: the server has the last word and explains.
 */
const ALLOWED: Record<string, ReadonlyArray<SessionState>> = {
  [CommandIDs.pause]: ['active', 'idle'],
  [CommandIDs.resume]: ['paused', 'failed', 'suspended'],
  [CommandIDs.resumeCpu]: ['paused', 'failed', 'waiting'],
  [CommandIDs.cancel]: ['pausing', 'waiting'],
  [CommandIDs.keepRunning]: ['active', 'idle'],
  [CommandIDs.discard]: ['paused', 'failed']
};

/**
 * The server path of a notebook: the one its Jupyter session uses.
 */
export function notebookPath(panel: NotebookPanel): string {
  return panel.sessionContext.path || panel.context.localPath;
}

/**
 * Register the commands; dispose the result to remove them.
 */
export function addCommands(options: ICommandsOptions): IDisposable {
  const { api, commands, gate, model, tracker, trans } = options;
  let policies: Promise<IPolicy[]> | null = null;

  /** The notebook path a command's arguments name, else the current one. */
  const pathOf = (args: ReadonlyPartialJSONObject): string | null =>
    (args as ISessionCommandArgs).path ??
    (tracker?.currentWidget ? notebookPath(tracker.currentWidget) : null);

  /** The session a command's arguments name, as last polled. */
  const known = (args: ReadonlyPartialJSONObject): ISession | null => {
    const a = args as ISessionCommandArgs;
    return a.sessionId ? model.byId(a.sessionId) : model.byPath(pathOf(args));
  };

  /** Whether a command has a target, and its known state allows it. */
  const allows = (id: string, args: ReadonlyPartialJSONObject): boolean => {
    const a = args as ISessionCommandArgs;
    if (!a.sessionId && !pathOf(args)) {
      return false;
    }
    const session = known(args);
    if (!session) {
      return !a.sessionId;
    }
    if (id === CommandIDs.resume && session.state === 'failed') {
      return session.checkpoint !== null;
    }
    if (id === CommandIDs.resumeCpu && session.state !== 'waiting') {
      // Without GPU tensors a CPU resume is the plain Resume: not offered.
      return ALLOWED[id].includes(session.state) && offersCpuResume(session);
    }
    if (id === CommandIDs.keepRunning) {
      return session.pause_at !== null;
    }
    if (id === CommandIDs.pause && isRebuilding(session)) {
      return false; // the server refuses until the re-run ends
    }
    return ALLOWED[id].includes(session.state);
  };

  /** The session to act on, asking the server when the poll has not seen it. */
  const target = async (
    args: ReadonlyPartialJSONObject
  ): Promise<ISession | null> => {
    const a = args as ISessionCommandArgs;
    const session = known(args);
    if (session) {
      return session;
    }
    if (a.sessionId) {
      return api.getSession(a.sessionId);
    }
    const path = pathOf(args);
    if (!path) {
      return null;
    }
    const found = (await api.listSessions({ path })).find(s => s.path === path);
    if (!found) {
      Notification.warning(
        trans.__('No GPU pause session is tracked for %1.', path),
        { autoClose: 5000 }
      );
    }
    return found ?? null;
  };

  /** Run an action on a command's session, reporting failures. */
  const run = async (
    args: ReadonlyPartialJSONObject,
    action: (session: ISession) => Promise<ISession | void>
  ): Promise<void> => {
    let session: ISession | null = null;
    try {
      session = await target(args);
      if (!session) {
        return;
      }
      const updated = await action(session);
      if (updated) {
        model.update(updated);
      }
    } catch (error) {
      // A GPU resume over budget: when GPUs are back, and Resume on CPU.
      if (!notifyBudgetRefusal(error, session, commands, trans)) {
        const text = Private.messageOf(error, trans);
        Notification.error(text, { autoClose: false });
      }
    } finally {
      void model.refresh();
    }
  };

  /**
   * Add a session command. One that is only sometimes offered (`offered`)
   * is hidden where it does not apply, instead of greyed out. A label or
   * caption may depend on the session the arguments name.
   */
  const add = (
    id: string,
    label: CommandRegistry.CommandFunc<string> | string,
    caption: CommandRegistry.CommandFunc<string> | string,
    execute: (args: ReadonlyPartialJSONObject) => Promise<void>,
    offered = false
  ): IDisposable =>
    commands.addCommand(id, {
      label,
      caption,
      describedBy: { args: Private.SESSION_ARGS },
      isEnabled: args => allows(id, args),
      isVisible: offered ? args => allows(id, args) : undefined,
      execute
    });

  const disposables = new DisposableSet();

  disposables.add(
    add(
      CommandIDs.pause,
      trans.__('Pause Kernel and Release GPU'),
      trans.__("Save the kernel's state to storage and shut the kernel down"),
      args =>
        run(args, async session => {
          if (!(await confirmPause(session))) {
            return;
          }
          return api.pause(session.id);
        })
    )
  );

  /**
   * Ask before a pause: always when some variables cannot be saved or some
   * of the kernel's state will not continue after the resume (a running
   * thread, a child process…; they are listed), else when the user's
   * setting says so.
   */
  const confirmPause = async (session: ISession): Promise<boolean> => {
    const check = await api.check(session.id).catch(() => null);
    if (check?.error) {
      // A registered variable cannot be saved: the pause would fail and
      // change nothing, so say why instead of offering it.
      await showDialog({
        title: trans.__('This kernel cannot be paused yet'),
        body: trans.__(
          'A registered variable cannot be saved, so a pause would fail (and change nothing): %1. Fix or unregister it (gp.unregister) and try again.',
          check.error
        ),
        buttons: [Dialog.okButton({ label: trans.__('OK') })]
      });
      return false;
    }
    const skipped = check?.skipped ?? [];
    const notCarried = check?.ambient?.not_carried ?? [];
    const lost = skipped.length > 0 || notCarried.length > 0;
    if (!lost && !options.settings().confirmBeforePause) {
      return true;
    }
    const result = await showDialog({
      title: skipped.length
        ? trans.__('Some variables cannot be saved')
        : notCarried.length
          ? trans.__('Some state will not continue after the resume')
          : trans.__('Pause kernel?'),
      body: Private.pauseBody(session, check, trans),
      buttons: [
        Dialog.cancelButton({ label: trans.__('Cancel') }),
        lost
          ? Dialog.warnButton({ label: trans.__('Pause anyway') })
          : Dialog.okButton({ label: trans.__('Pause') })
      ]
    });
    return result.button.accept;
  };

  /**
   * Resume a paused or failed session, on `device` when given. The server
   * restores into a kernel the notebook opened while paused as long as that
   * kernel has run nothing; once code ran in it, the server refuses
   * (`kernel-exists`) and the user is asked before its variables are
   * overwritten: never without asking. A suspended session comes back in
   * place, in its own kernel.
   */
  const resume = async (
    session: ISession,
    device?: ResumeDevice
  ): Promise<ISession | void> => {
    if (session.state === 'suspended') {
      // In place: the same kernel, its CUDA state back on a GPU. No kernel
      // to start and none to ask about.
      return api.resume(session.id, {});
    }
    const options: IResumeOptions = device ? { device } : {};
    // A paused notebook open here without a kernel starts one first, as
    // JupyterLab does: the server restores into it.
    const held = gate?.heldAt(session.path);
    if (held) {
      await gate!.release(held);
    }
    try {
      return await api.resume(session.id, options);
    } catch (error) {
      if (!(error instanceof GpuPauseError) || error.reason !== KERNEL_EXISTS) {
        throw error;
      }
      // The server now lists that kernel as a session of its own: show it
      // behind the question.
      await model.refresh().catch(() => undefined);
      const kernel =
        Private.openKernel(tracker, session.path) ??
        (await Private.runningKernel(api, session));
      if (!kernel) {
        throw error;
      }
      const result = await showDialog({
        title: trans.__('Restore into the running kernel?'),
        body: trans.__(
          '%1 has a new kernel since it was paused, and code was run in it. Restoring replaces the variables of that kernel with the saved ones.',
          session.path
        ),
        buttons: [
          Dialog.cancelButton({ label: trans.__('Cancel') }),
          Dialog.warnButton({ label: trans.__('Restore into it') })
        ]
      });
      if (!result.button.accept) {
        return;
      }
      return api.resume(session.id, { ...options, into_kernel: kernel });
    }
  };

  disposables.add(
    add(
      CommandIDs.resume,
      args =>
        known(args)?.state === 'suspended'
          ? trans.__('Resume Suspended Kernel')
          : trans.__('Resume Paused Kernel'),
      args =>
        known(args)?.state === 'suspended'
          ? resumeInPlaceHint(trans)
          : trans.__('Start a kernel and restore the saved state into it'),
      args => run(args, session => resume(session))
    )
  );

  disposables.add(
    add(
      CommandIDs.resumeCpu,
      trans.__('Resume on CPU'),
      trans.__(
        'Start a kernel without a GPU and restore the saved state into it, GPU tensors into CPU memory; a resume waiting for a GPU leaves the queue'
      ),
      args =>
        run(args, session =>
          // A waiting resume already settled its kernel question: the
          // server only moves it from the GPU queue onto the CPU.
          session.state === 'waiting'
            ? api.resume(session.id, { device: 'cpu' })
            : resume(session, 'cpu')
        ),
      true
    )
  );

  disposables.add(
    add(
      CommandIDs.cancel,
      trans.__('Cancel Pause or Resume'),
      trans.__(
        'Stop a running pause (the kernel keeps running) or leave the GPU queue (the session stays paused)'
      ),
      args => run(args, session => api.cancel(session.id))
    )
  );

  disposables.add(
    add(
      CommandIDs.keepRunning,
      trans.__('Keep Kernel Running'),
      trans.__("Postpone the idle policy's pause of this kernel"),
      args =>
        run(args, async session => {
          policies = policies ?? api.policies().catch(() => []);
          const policy = (await policies).find(p => p.name === session.policy);
          const seconds = Private.keepaliveSeconds(policy);
          const updated = await api.keepalive(session.id, seconds);
          Notification.info(
            trans.__(
              '%1 keeps running for %2 more.',
              session.path,
              durationText(seconds, trans)
            ),
            { autoClose: 5000 }
          );
          return updated;
        })
    )
  );

  disposables.add(
    add(
      CommandIDs.discard,
      trans.__('Discard Paused Session'),
      trans.__('Forget the session and delete its checkpoints'),
      args =>
        run(args, async session => {
          const result = await showDialog({
            title: trans.__('Discard %1?', session.path),
            body: trans.__(
              'Its checkpoints (%1) are deleted from storage and its saved variables can no longer be restored. The notebook file itself is kept.',
              session.checkpoint
                ? bytesText(session.checkpoint.bytes)
                : trans.__('none')
            ),
            buttons: [
              Dialog.cancelButton({ label: trans.__('Keep') }),
              Dialog.warnButton({ label: trans.__('Discard') })
            ]
          });
          if (result.button.accept) {
            await api.discard(session.id, true);
          }
        })
    )
  );

  disposables.add(
    commands.addCommand(CommandIDs.openPanel, {
      label: trans.__('Show GPU Sessions'),
      caption: trans.__('Open the panel that lists every GPU session'),
      describedBy: { args: Private.NO_ARGS },
      execute: () => options.openPanel()
    })
  );

  disposables.add(
    commands.addCommand(CommandIDs.refresh, {
      label: trans.__('Refresh GPU Sessions'),
      caption: trans.__('Ask the server for the sessions now'),
      describedBy: { args: Private.NO_ARGS },
      execute: () => model.refresh()
    })
  );

  return disposables;
}

/**
 * Module-private helpers.
 */
namespace Private {
  /**
   * Argument schema of commands that take none.
   */
  export const NO_ARGS = {
    type: 'object' as const,
    properties: {},
    additionalProperties: false
  };

  /**
   * Argument schema of the session commands.
   */
  export const SESSION_ARGS = {
    type: 'object' as const,
    properties: {
      sessionId: { type: 'string', description: 'Session id' },
      path: { type: 'string', description: 'Notebook path' }
    },
    additionalProperties: false
  };

  /**
   * How long "Keep running" postpones: one idle period, within the policy's
   * keep-alive limit.
   */
  export function keepaliveSeconds(policy: IPolicy | undefined): number {
    const wanted = policy?.idle_timeout ?? 3600;
    const limit = policy?.max_keepalive ?? wanted;
    return Math.max(1, Math.min(wanted, limit));
  }

  /**
   * The connected kernel of the notebook open at `path`, if any.
   */
  export function openKernel(
    tracker: INotebookTracker | null,
    path: string
  ): string | null {
    const panel = tracker?.find(p => notebookPath(p) === path);
    const kernel = panel?.sessionContext.session?.kernel;
    return kernel && kernel.connectionStatus === 'connected' ? kernel.id : null;
  }

  /**
   * The running kernel of a session's notebook as the server lists it (the
   * notebook may be open in another page), if any.
   */
  export async function runningKernel(
    api: GpuPauseAPI,
    session: ISession
  ): Promise<string | null> {
    const listed = await api.listSessions({ path: session.path });
    const running = listed.find(
      s =>
        s.id !== session.id &&
        s.path === session.path &&
        s.kernel_id !== null &&
        (s.state === 'active' || s.state === 'idle')
    );
    return running?.kernel_id ?? null;
  }

  /**
   * The body of the pause dialog: what will happen and, when some
   * variables cannot be saved, which ones and why; when some of the
   * kernel's state cannot travel (a running thread, a child process, an
   * open connection…), what and why.
   */
  export function pauseBody(
    session: ISession,
    check: ICheckReport | null,
    trans: TranslationBundle
  ): Widget {
    const node = document.createElement('div');
    node.className = 'jp-GpuPause-dialog';
    const intro = document.createElement('p');
    intro.textContent = trans.__(
      'The kernel of %1 will be saved to storage and shut down, releasing its GPU. Resume it later to get its variables back.',
      session.path
    );
    node.appendChild(intro);
    const skipped = check?.skipped ?? [];
    if (skipped.length) {
      const warn = document.createElement('p');
      warn.textContent = trans.__(
        'These variables cannot be saved and will be lost:'
      );
      node.appendChild(warn);
      node.appendChild(reasonList(skipped, 'jp-GpuPause-skipped'));
    }
    const notCarried = check?.ambient?.not_carried ?? [];
    if (notCarried.length) {
      const heading = document.createElement('p');
      heading.className = 'jp-GpuPause-notCarriedHeading';
      heading.textContent = trans.__('Will not continue after the resume:');
      node.appendChild(heading);
      node.appendChild(reasonList(notCarried, 'jp-GpuPause-notCarried'));
    }
    return new Widget({ node });
  }

  /**
   * A list of names, each as code followed by why.
   */
  function reasonList(
    items: ReadonlyArray<{ name: string; reason: string }>,
    className: string
  ): HTMLUListElement {
    const list = document.createElement('ul');
    list.className = className;
    for (const item of items) {
      const li = document.createElement('li');
      const name = document.createElement('code');
      name.textContent = item.name;
      li.appendChild(name);
      li.appendChild(document.createTextNode(` — ${item.reason}`));
      list.appendChild(li);
    }
    return list;
  }

  /**
   * A message for the user: the server's own sentence when it gave one.
   */
  export function messageOf(error: unknown, trans: TranslationBundle): string {
    if (error instanceof GpuPauseError) {
      return error.message;
    }
    return trans.__('Unexpected error: %1', String(error));
  }
}
