/**
 * Lifecycle events as JupyterLab notifications: an idle policy's warning
 * with "Keep running" and "Pause now", the outcome of every pause and
 * resume, whoever started it, and what a resume waiting for a GPU did by
 * itself (a GPU became free, or none did in time). Also reattaches open
 * notebooks to the kernel a resume started, so the next cell sees the
 * restored variables.
 */
import { Notification } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { Session } from '@jupyterlab/services';
import type { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';

import { isCapacityTimeout, offersCpuResume } from '../actions';
import { notCarriedText } from '../ambient/text';
import { ModelEventListener } from '../eventListener';
import { bytesText, errorText, fileName, sentence } from '../format';
import { SessionsModel } from '../model';
import { resumeInPlaceHint, suspendedEventText } from '../suspend/text';
import { targetSession } from '../target';
import {
  CommandIDs,
  IAmbientItem,
  IEvent,
  ISession,
  ISessionCommandArgs,
  SessionState
} from '../tokens';
import { onBehalfOf } from '../onbehalf/text';
import { unpausable } from '../unpausable/text';
import { reattach } from './reattach';
import {
  failureText,
  pauseFailedText,
  resumedAmbient,
  resumedText,
  skippedText,
  warnedText
} from './text';

/**
 * States a waiting resume reaches when a GPU became free for it.
 */
const CONTINUED: ReadonlyArray<SessionState> = ['restoring', 'active', 'idle'];

/**
 * Commands by which the user moves a waiting resume out of the queue; what
 * follows is their doing, not news.
 */
const LEAVE_QUEUE: ReadonlyArray<string> = [
  CommandIDs.cancel,
  CommandIDs.resumeCpu
];

/**
 * Construction options of {@link EventNotifier}.
 */
export interface IEventNotifierOptions {
  /** Every tracked session, and the events. */
  model: SessionsModel;
  /** Runs the actions of the notifications. */
  commands: CommandRegistry;
  /** Open notebooks, to reattach after a resume. */
  tracker: INotebookTracker | null;
  /** Jupyter's session manager, to see a kernel change at once. */
  sessions: Session.IManager;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
}

/**
 * Turns lifecycle events into notifications and keeps open notebooks on the
 * kernel of their session.
 */
export class EventNotifier extends ModelEventListener {
  constructor(options: IEventNotifierOptions) {
    super(options.model);
    this._options = options;
    options.model.changed.connect(this._onSessions, this);
    options.commands.commandExecuted.connect(this._onCommand, this);
  }

  /**
   * Drop the connections of its own (the events' is the base class's).
   */
  protected disconnect(): void {
    this._options.model.changed.disconnect(this._onSessions, this);
    this._options.commands.commandExecuted.disconnect(this._onCommand, this);
  }

  protected onEvents(_: SessionsModel, events: IEvent[]): void {
    for (const event of events) {
      this._notify(event);
    }
  }

  private _onSessions(model: SessionsModel): void {
    this._withdrawWarnings(model);
    this._followQueue(model);
  }

  /**
   * Remember that the user moved a waiting resume (Cancel, Resume on CPU
   * now), from any view: the registry sees every command run.
   */
  private _onCommand(
    _: CommandRegistry,
    executed: CommandRegistry.ICommandExecutedArgs
  ): void {
    if (!LEAVE_QUEUE.includes(executed.id)) {
      return;
    }
    // The session as the commands resolve it.
    const { model, tracker } = this._options;
    const args = executed.args as ISessionCommandArgs;
    const session = targetSession(args, model, tracker);
    if (session?.state === 'waiting') {
      this._leftByUser.add(session.id);
    }
  }

  /**
   * Announce what a waiting resume did by itself, from two successive
   * snapshots (the first one is history): it continues because a GPU
   * became free, or it failed because none did in time. A move the user
   * made is not news, and neither is a resume already announced by its
   * event (events and snapshots may arrive in either order).
   */
  private _followQueue(model: SessionsModel): void {
    const states = new Map<string, SessionState>();
    for (const session of model.sessions) {
      const id = session.id;
      const before = this._states.get(id);
      states.set(id, session.state);
      if (before === undefined || before === session.state) {
        continue;
      }
      if (session.state === 'waiting') {
        // A new wait: how the last one ended is no longer news.
        this._told.delete(id);
      }
      if (before !== 'waiting') {
        continue;
      }
      const byUser = this._leftByUser.delete(id);
      if (isCapacityTimeout(session)) {
        this._capacityTimeout(session, id, '');
      } else if (
        !byUser &&
        CONTINUED.includes(session.state) &&
        session.device !== 'cpu' &&
        this._told.get(id) !== 'resumed'
      ) {
        this._gpuFree(session);
      }
    }
    this._states = states;
    for (const id of [...this._told.keys(), ...this._leftByUser]) {
      if (!states.has(id)) {
        this._told.delete(id);
        this._leftByUser.delete(id);
      }
    }
  }

  /**
   * A GPU became free and the queue let the resume go on.
   */
  private _gpuFree(session: ISession): void {
    const { trans } = this._options;
    const path = fileName(session.path);
    this._outcome(
      session.id,
      Notification.info(
        session.state === 'restoring'
          ? trans.__('%1: a GPU is free — restoring now', path)
          : trans.__('%1: a GPU became free — resumed', path),
        { autoClose: 6000 }
      )
    );
  }

  /**
   * No GPU became free in time: the checkpoint is intact, so offer to try
   * again (on the CPU too when that is a real choice). Told once, whether
   * the snapshot or the `resume_failed` event shows it first.
   */
  private _capacityTimeout(
    session: ISession | null,
    sessionId: string,
    fallback: string
  ): void {
    if (this._told.get(sessionId) === 'capacity-timeout') {
      return;
    }
    this._told.set(sessionId, 'capacity-timeout');
    const { trans } = this._options;
    const path = fileName(session?.path ?? sessionId);
    const reason = isCapacityTimeout(session)
      ? errorText(session!.error, trans)
      : sentence(fallback);
    const actions = [
      this._action(trans.__('Resume'), CommandIDs.resume, sessionId)
    ];
    if (session && offersCpuResume(session)) {
      actions.push(
        this._action(trans.__('Resume on CPU'), CommandIDs.resumeCpu, sessionId)
      );
    }
    this._outcome(
      sessionId,
      Notification.warning(trans.__('%1: %2', path, reason), {
        autoClose: false,
        actions
      })
    );
  }

  /**
   * A warning whose session no longer has a pending pause (keep-alive, the
   * user came back, the pause started) is withdrawn.
   */
  private _withdrawWarnings(model: SessionsModel): void {
    for (const [sessionId, warning] of this._warnings) {
      const session = model.byId(sessionId);
      // A warn-only policy never sets `pause_at`: its warning lasts until
      // the user is back (the session is active again).
      const over = !session
        ? true
        : warning.action === 'warn'
          ? session.state !== 'idle'
          : session.pause_at === null;
      if (over) {
        Notification.dismiss(warning.id);
        this._warnings.delete(sessionId);
      }
    }
  }

  private _notify(event: IEvent): void {
    const { model, trans } = this._options;
    const session = model.byId(event.session_id);
    // The file name keeps a toast short; the panel shows the folder.
    const path = fileName(session?.path ?? event.session_id);
    const message = event.detail.message ?? '';
    const byPolicy = event.reason.startsWith('policy:');
    const sessionId = event.session_id;
    switch (event.type) {
      case 'warned':
        this._warn(event, path);
        break;
      case 'paused':
        this._dismissWarning(sessionId);
        this._refreshKernels();
        if (onBehalfOf(event) !== null) {
          // An admin paused it: OnBehalfNotifier says who and why, with Resume.
          this._dismissOutcome(sessionId);
          break;
        }
        this._outcome(
          sessionId,
          Notification.success(
            trans.__(
              'Paused %1: %2 saved, GPU released.',
              path,
              bytesText(event.detail.bytes as number)
            ) +
              skippedText(event.detail.skipped, trans) +
              notCarriedText(
                event.detail.not_carried as IAmbientItem[] | undefined,
                trans
              ),
            {
              autoClose: byPolicy ? false : 6000,
              actions: [
                this._action(trans.__('Resume'), CommandIDs.resume, sessionId)
              ]
            }
          )
        );
        break;
      case 'suspended':
        // An outcome: the pause's or the resume's toast replaces it.
        this._dismissWarning(sessionId);
        this._outcome(
          sessionId,
          Notification.info(suspendedEventText(path, event, trans), {
            autoClose: byPolicy ? false : 6000,
            actions: [this._resumeInPlace(sessionId)]
          })
        );
        break;
      case 'pause_failed': {
        this._dismissWarning(sessionId);
        // Behind a suspended kernel, which still holds every variable: a
        // warning, with its Resume.
        const text = pauseFailedText(path, session, message, trans);
        this._outcome(
          sessionId,
          session?.state === 'suspended'
            ? Notification.warning(text, {
                autoClose: false,
                actions: [this._resumeInPlace(sessionId)]
              })
            : Notification.error(text, { autoClose: false })
        );
        break;
      }
      case 'resumed':
        this._told.set(sessionId, 'resumed');
        this._resumed(event, path, session);
        if (session) {
          void reattach(
            this._options.tracker,
            this._options.sessions,
            session.path,
            event.detail.kernel_id as string
          );
        }
        break;
      case 'resume_failed':
        if (
          event.detail.error_reason === 'capacity-timeout' ||
          isCapacityTimeout(session)
        ) {
          this._capacityTimeout(session, sessionId, message);
          break;
        }
        this._outcome(
          sessionId,
          Notification.error(
            trans.__(
              'Resume of %1 failed: %2',
              path,
              failureText(session, message, trans)
            ),
            { autoClose: false }
          )
        );
        break;
      case 'waiting':
        // An outcome too: "a GPU is free" replaces it. The server's message
        // already says that it waits, where in line and why: it follows the
        // file name as it is, not after a sentence saying the same.
        this._outcome(
          sessionId,
          Notification.info(
            message
              ? trans.__('%1: %2', path, sentence(message))
              : trans.__('%1 is waiting for a free GPU.', path),
            { autoClose: 6000 }
          )
        );
        break;
      case 'culled':
      case 'cull_failed':
      case 'gpu_hold_alarm':
        Notification.warning(message || trans.__('%1: %2', path, event.type), {
          autoClose: false
        });
        if (event.type === 'culled') {
          this._refreshKernels();
        }
        break;
      default:
        // keepalive, cancelled, checkpoint_deleted, discarded: the user did
        // it and already sees the result. checkpoints_gone, recovered,
        // server_stop, server_stop_failed: no toast (yet); the panel shows
        // the session as it is once it refreshes.
        break;
    }
  }

  /**
   * The toast of a resume. When some of the kernel's ambient state did not
   * come back (a thread no longer runs…), it stays longer, and "Show
   * details" opens the panel, whose row lists each with why (a toast shows
   * 140 characters); its tooltip lists them too.
   */
  private _resumed(event: IEvent, path: string, session: ISession | null) {
    const { commands, trans } = this._options;
    const ambient = resumedAmbient(event, session);
    const lost = ambient?.not_restored ?? [];
    const actions: Notification.IAction[] = lost.length
      ? [
          {
            label: trans.__('Show details'),
            caption: trans.__(
              'Not restored:\n%1',
              lost.map(item => `${item.name}: ${item.reason}`).join('\n')
            ),
            callback: () => void commands.execute(CommandIDs.openPanel)
          }
        ]
      : [];
    this._outcome(
      event.session_id,
      Notification.success(resumedText(path, event, trans, ambient), {
        autoClose: lost.length ? 15000 : 6000,
        actions
      })
    );
  }

  /**
   * One warning per session, updated in place when the policy warns again.
   */
  private _warn(event: IEvent, path: string): void {
    const { trans } = this._options;
    const action = event.detail.action ?? 'pause';
    const text = warnedText(path, event, trans);
    const actions = [
      this._action(
        trans.__('Keep running'),
        CommandIDs.keepRunning,
        event.session_id
      )
    ];
    // A kernel that cannot be paused is warned of its shutdown: no pause.
    const session = this._options.model.byId(event.session_id);
    if (action !== 'warn' && !unpausable(session)) {
      actions.push(
        this._action(trans.__('Pause now'), CommandIDs.pause, event.session_id)
      );
    }
    const existing = this._warnings.get(event.session_id)?.id;
    if (existing && Notification.manager.has(existing)) {
      Notification.update({
        id: existing,
        message: text,
        type: 'warning',
        actions
      });
      return;
    }
    const id = Notification.warning(text, { autoClose: false, actions });
    this._warnings.set(event.session_id, { id, action });
  }

  /**
   * Keep one outcome toast per session: a newer outcome (resumed after
   * paused) replaces the older one and its now stale actions.
   */
  private _outcome(sessionId: string, id: string): void {
    const previous = this._outcomes.get(sessionId);
    if (previous && previous !== id) {
      Notification.dismiss(previous);
    }
    this._outcomes.set(sessionId, id);
  }

  /**
   * The session's last outcome toast is over, and another notifier tells
   * what follows.
   */
  private _dismissOutcome(sessionId: string): void {
    const previous = this._outcomes.get(sessionId);
    if (previous) {
      Notification.dismiss(previous);
      this._outcomes.delete(sessionId);
    }
  }

  private _dismissWarning(sessionId: string): void {
    const warning = this._warnings.get(sessionId);
    if (warning) {
      Notification.dismiss(warning.id);
      this._warnings.delete(sessionId);
    }
  }

  /**
   * Resume, in place: the action of a suspended kernel's toasts.
   */
  private _resumeInPlace(sessionId: string): Notification.IAction {
    const { trans } = this._options;
    const label = trans.__('Resume');
    return this._action(
      label,
      CommandIDs.resume,
      sessionId,
      resumeInPlaceHint(trans)
    );
  }

  private _action(
    label: string,
    command: string,
    sessionId: string,
    caption = label
  ): Notification.IAction {
    return {
      label,
      caption,
      callback: () => {
        void this._options.commands.execute(command, { sessionId });
      }
    };
  }

  /**
   * Let Lab see at once that a kernel is gone, instead of at its next poll.
   */
  private _refreshKernels(): void {
    void this._options.sessions.refreshRunning().catch(() => undefined);
  }

  private _leftByUser = new Set<string>();
  private _options: IEventNotifierOptions;
  private _outcomes = new Map<string, string>();
  private _states = new Map<string, SessionState>();
  private _told = new Map<string, 'resumed' | 'capacity-timeout'>();
  private _warnings = new Map<string, { id: string; action: string }>();
}
