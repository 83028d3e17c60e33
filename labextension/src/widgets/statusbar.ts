/**
 * The status bar item: the current notebook's session at a glance —
 * "GPU 0 · 14.2 GiB · idle 12 min", "Paused · 6.1 GB", "Waiting for GPU · #2",
 * "Suspended · kept until 14:05". A click pauses a running kernel and
 * resumes a paused or suspended one.
 */
import type { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { primaryCommand, suspendPhase } from '../actions';
import { errorText, statusText, waitReasonText } from '../format';
import { SessionsModel } from '../model';
import { suspendedMessage } from '../suspend/text';
import { CommandIDs, ISession } from '../tokens';
import { setText } from './dom';

/**
 * Construction options of {@link GpuPauseStatus}.
 */
export interface IGpuPauseStatusOptions {
  /** Every tracked session. */
  model: SessionsModel;
  /** Commands run on click. */
  commands: CommandRegistry;
  /** Translation of the item's strings. */
  trans: TranslationBundle;
}

/**
 * A status bar item for the current notebook's session.
 */
export class GpuPauseStatus extends Widget {
  constructor(options: IGpuPauseStatusOptions) {
    super({ node: document.createElement('button') });
    this.addClass('jp-GpuPause-status');
    this.node.setAttribute('type', 'button');
    this._model = options.model;
    this._commands = options.commands;
    this._trans = options.trans;
    this._model.changed.connect(this._update, this);
    this._model.clock.connect(this._render, this);
    this.node.addEventListener('click', () => this._click());
    this._render();
  }

  /**
   * Emitted when {@link isActive} may have changed.
   */
  get activeStateChanged(): ISignal<this, void> {
    return this._activeStateChanged;
  }

  /**
   * The notebook path whose session is shown; `null` for none.
   */
  get path(): string | null {
    return this._path;
  }
  set path(path: string | null) {
    if (path !== this._path) {
      this._path = path;
      this._update();
    }
  }

  /**
   * Whether the user wants the item (the `showStatusBar` setting).
   */
  get enabled(): boolean {
    return this._enabled;
  }
  set enabled(enabled: boolean) {
    if (enabled !== this._enabled) {
      this._enabled = enabled;
      this._activeStateChanged.emit();
    }
  }

  /**
   * Whether the item is shown: enabled, and the notebook has a session.
   */
  isActive(): boolean {
    return this._enabled && this._session !== null;
  }

  /**
   * Release the item.
   */
  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    Signal.disconnectReceiver(this);
    Signal.clearData(this);
    super.dispose();
  }

  private get _session(): ISession | null {
    return this._model.byPath(this._path);
  }

  private _click(): void {
    const session = this._session;
    const command = session ? primaryCommand(session) : null;
    if (session && command) {
      void this._commands.execute(command, { sessionId: session.id });
    }
  }

  private _update(): void {
    this._render();
    this._activeStateChanged.emit();
  }

  private _render(): void {
    const session = this._session;
    setText(this.node, session ? statusText(session, this._trans) : '');
    this.node.dataset.state = session?.state ?? '';
    this.node.dataset.suspend = suspendPhase(session) ?? '';
    if (!session) {
      this.node.title = '';
      return;
    }
    const command = primaryCommand(session);
    const hint =
      command === CommandIDs.pause
        ? this._trans.__('Click to pause the kernel and release its GPU.')
        : session.state === 'suspended'
          ? this._trans.__(
              'Click to resume in place: the same kernel, back on a GPU.'
            )
          : command === CommandIDs.resume
            ? this._trans.__('Click to resume the kernel with its state.')
            : session.state === 'waiting'
              ? this._trans.__(
                  'Click to leave the queue; the session stays paused.'
                )
              : '';
    const detail =
      session.state === 'failed'
        ? errorText(session.error, this._trans)
        : session.state === 'waiting'
          ? session.message || waitReasonText(session, this._trans)
          : session.state === 'suspended'
            ? suspendedMessage(session, this._trans, Date.now())
            : session.message;
    this.node.title = [detail, hint].filter(Boolean).join('\n');
  }

  private _activeStateChanged = new Signal<this, void>(this);
  private _commands: CommandRegistry;
  private _enabled = true;
  private _model: SessionsModel;
  private _path: string | null = null;
  private _trans: TranslationBundle;
}
