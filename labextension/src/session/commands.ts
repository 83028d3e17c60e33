/**
 * The commands of a session's lifecycle: pause, resume, resume on CPU,
 * cancel, keep running and discard. Each takes an optional session id or
 * notebook path and otherwise acts on the current notebook, so the palette,
 * the panel, the notebook toolbar, the status bar and the notifications
 * share one code path.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import type { INotebookTracker } from '@jupyterlab/notebook';
import type { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';
import { DisposableSet, IDisposable } from '@lumino/disposable';

import { isRebuilding, offersCpuResume } from '../actions';
import { GpuPauseAPI, GpuPauseError } from '../api';
import { notifyBudgetRefusal } from '../budget/notify';
import { bytesText, durationText } from '../format';
import type { SessionsModel } from '../model';
import { resumeInPlaceHint } from '../suspend/text';
import { targetPath, targetSession } from '../target';
import {
  CommandIDs,
  ICommandsHost,
  IGpuPauseSettings,
  IPolicy,
  ISession,
  ISessionCommandArgs,
  SessionState
} from '../tokens';
import { confirmPause } from './confirmPause';
import type { KernelGate } from './gate';
import { resumeSession } from './resume';

/**
 * What the session commands need.
 */
export interface ISessionCommandsDeps {
  /** The API client. */
  api: Pick<
    GpuPauseAPI,
    | 'getSession'
    | 'listSessions'
    | 'check'
    | 'pause'
    | 'resume'
    | 'cancel'
    | 'policies'
    | 'keepalive'
    | 'discard'
  >;
  /** Every tracked session. */
  model: Pick<SessionsModel, 'byId' | 'byPath' | 'update' | 'refresh'>;
  /** The settings in force; read at each run. */
  settings: () => Readonly<IGpuPauseSettings>;
  /** The notebook tracker, when notebooks are available. */
  tracker: INotebookTracker | null;
  /** What keeps paused notebooks from starting a kernel, when it runs. */
  gate: Pick<KernelGate, 'heldAt' | 'release'> | null;
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
 * Register the session commands; dispose the result to remove them.
 */
export function addSessionCommands(
  app: ICommandsHost,
  deps: ISessionCommandsDeps
): IDisposable {
  const { commands } = app;
  const { api, model, tracker, trans } = deps;
  let policies: Promise<IPolicy[]> | null = null;

  /** The session a command's arguments name, as last polled. */
  const known = (args: ReadonlyPartialJSONObject): ISession | null =>
    targetSession(args as ISessionCommandArgs, model, tracker);

  /** Whether a command has a target, and its known state allows it. */
  const allows = (id: string, args: ReadonlyPartialJSONObject): boolean => {
    const a = args as ISessionCommandArgs;
    if (!a.sessionId && !targetPath(a, tracker)) {
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
    const path = targetPath(a, tracker);
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
          if (!(await confirmPause(session, deps))) {
            return;
          }
          return api.pause(session.id);
        })
    )
  );

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
      args => run(args, session => resumeSession(session, undefined, deps))
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
            : resumeSession(session, 'cpu', deps)
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

  return disposables;
}

/**
 * Module-private helpers.
 */
namespace Private {
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
   * A message for the user: the server's own sentence when it gave one.
   */
  export function messageOf(error: unknown, trans: TranslationBundle): string {
    if (error instanceof GpuPauseError) {
      return error.message;
    }
    return trans.__('Unexpected error: %1', String(error));
  }
}
