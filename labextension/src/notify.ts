/**
 * Lifecycle events as JupyterLab notifications: an idle policy's warning
 * with "Keep running" and "Pause now", and the outcome of every pause and
 * resume, whoever started it. Also reattaches open notebooks to the kernel
 * a resume started, so the next cell sees the restored variables.
 */
import { Notification } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Session } from '@jupyterlab/services';
import type { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { IDisposable } from '@lumino/disposable';

import { notebookPath } from './commands';
import { bytesText, errorText, sentence } from './format';
import { SessionsModel } from './model';
import { CommandIDs, IEvent, ISession, ISkippedObject } from './tokens';

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
export class EventNotifier implements IDisposable {
  constructor(options: IEventNotifierOptions) {
    this._options = options;
    options.model.eventsReceived.connect(this._onEvents, this);
    options.model.changed.connect(this._onSessions, this);
  }

  /**
   * Whether the notifier has been disposed.
   */
  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * Stop listening; open notifications stay.
   */
  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._options.model.eventsReceived.disconnect(this._onEvents, this);
    this._options.model.changed.disconnect(this._onSessions, this);
  }

  private _onEvents(_: SessionsModel, events: IEvent[]): void {
    for (const event of events) {
      this._notify(event);
    }
  }

  /**
   * A warning whose session no longer has a pending pause (keep-alive, the
   * user came back, the pause started) is withdrawn.
   */
  private _onSessions(model: SessionsModel): void {
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
    const path = (session?.path ?? event.session_id).split('/').pop()!;
    const message = event.detail.message ?? '';
    const byPolicy = event.reason.startsWith('policy:');
    const sessionId = event.session_id;
    switch (event.type) {
      case 'warned':
        this._warn(event, path);
        break;
      case 'paused':
        this._dismissWarning(sessionId);
        this._outcome(
          sessionId,
          Notification.success(
            trans.__(
              'Paused %1: %2 saved, GPU released.',
              path,
              bytesText(event.detail.bytes as number)
            ) + Private.skippedText(event.detail.skipped, trans),
            {
              autoClose: byPolicy ? false : 6000,
              actions: [
                this._action(trans.__('Resume'), CommandIDs.resume, sessionId)
              ]
            }
          )
        );
        this._refreshKernels();
        break;
      case 'pause_failed':
        this._dismissWarning(sessionId);
        this._outcome(
          sessionId,
          Notification.error(
            Private.pauseFailedText(path, session, message, trans),
            { autoClose: false }
          )
        );
        break;
      case 'resumed':
        this._outcome(
          sessionId,
          Notification.success(trans.__('Resumed %1. %2', path, message), {
            autoClose: 6000
          })
        );
        if (session) {
          void this._reattach(session.path, event.detail.kernel_id as string);
        }
        break;
      case 'resume_failed':
        this._outcome(
          sessionId,
          Notification.error(
            trans.__(
              'Resume of %1 failed: %2',
              path,
              Private.failureText(session, message, trans)
            ),
            { autoClose: false }
          )
        );
        break;
      case 'waiting':
        Notification.info(
          trans.__('%1 is waiting for a free GPU. %2', path, message),
          { autoClose: 6000 }
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
        // keepalive, cancelled, checkpoint_deleted: the user did it and
        // already sees the result.
        break;
    }
  }

  /**
   * One warning per session, updated in place when the policy warns again.
   */
  private _warn(event: IEvent, path: string): void {
    const { trans } = this._options;
    const action = event.detail.action ?? 'pause';
    const at = event.detail.pause_at
      ? new Date(event.detail.pause_at).toLocaleTimeString()
      : '';
    const policy = event.reason.replace(/^policy:/, '');
    let text: string;
    if (action === 'cull') {
      text = trans.__(
        '%1 is idle: its kernel will be shut down at %2 without saving (policy %3).',
        path,
        at,
        policy
      );
    } else if (action === 'pause') {
      text = trans.__(
        '%1 is idle: it will be paused at %2 to release its GPU (policy %3).',
        path,
        at,
        policy
      );
    } else {
      text = trans.__(
        '%1 has been idle since %2 (policy %3).',
        path,
        at,
        policy
      );
    }
    text += Private.skippedText(event.detail.skipped, trans, true);
    const actions = [
      this._action(
        trans.__('Keep running'),
        CommandIDs.keepRunning,
        event.session_id
      )
    ];
    if (action !== 'warn') {
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

  private _dismissWarning(sessionId: string): void {
    const warning = this._warnings.get(sessionId);
    if (warning) {
      Notification.dismiss(warning.id);
      this._warnings.delete(sessionId);
    }
  }

  private _action(
    label: string,
    command: string,
    sessionId: string
  ): Notification.IAction {
    return {
      label,
      caption: label,
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

  /**
   * Point the notebook open at `path` to the kernel the resume started. The
   * server already attached that kernel to the notebook's Jupyter session;
   * Lab's copy of the session learns it from a refresh, or, when Lab had
   * dropped the session while the kernel was paused, by joining it.
   */
  private async _reattach(path: string, kernelId: string): Promise<void> {
    const { tracker, sessions } = this._options;
    const panels: NotebookPanel[] = [];
    tracker?.forEach(panel => {
      if (notebookPath(panel) === path) {
        panels.push(panel);
      }
    });
    if (!panels.length || !kernelId) {
      return;
    }
    await sessions.refreshRunning().catch(() => undefined);
    for (const panel of panels) {
      if (panel.sessionContext.session?.kernel?.id !== kernelId) {
        await panel.sessionContext
          .changeKernel({ id: kernelId })
          .catch(error => {
            console.warn('jupyter-gpu-pause: could not reattach', path, error);
          });
      }
    }
  }

  private _isDisposed = false;
  private _options: IEventNotifierOptions;
  private _outcomes = new Map<string, string>();
  private _warnings = new Map<string, { id: string; action: string }>();
}

/**
 * Module-private helpers.
 */
namespace Private {
  /**
   * " Not saved: a, b." for the objects a pause skipped; '' when none.
   */
  export function skippedText(
    skipped: ISkippedObject[] | null | undefined,
    trans: TranslationBundle,
    future = false
  ): string {
    if (!skipped || !skipped.length) {
      return '';
    }
    const names = skipped.map(s => s.name).join(', ');
    return (
      ' ' +
      (future
        ? trans.__('Will not survive: %1.', names)
        : trans.__('Not saved: %1.', names))
    );
  }

  /**
   * The toast of a failed pause. A refused pause leaves the kernel running
   * with its variables; that is said first.
   */
  export function pauseFailedText(
    path: string,
    session: ISession | null,
    fallback: string,
    trans: TranslationBundle
  ): string {
    const error = session?.error;
    const running = session?.state === 'active' || session?.state === 'idle';
    if (running && error && typeof error !== 'string' && error.state_intact) {
      // What is safe comes first: a toast may cut a long error short.
      return trans.__(
        'Pause of %1 failed; the kernel is still running with all its variables. %2',
        path,
        sentence(error.message)
      );
    }
    return trans.__(
      'Pause of %1 failed: %2',
      path,
      failureText(session, fallback, trans)
    );
  }

  /**
   * What failed and what is safe, preferring the session's error record
   * (it says whether the state is intact).
   */
  export function failureText(
    session: ISession | null,
    fallback: string,
    trans: TranslationBundle
  ): string {
    const error = session?.error;
    if (!error) {
      return fallback;
    }
    return errorText(error, trans);
  }
}
