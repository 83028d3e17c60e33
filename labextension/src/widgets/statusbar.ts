/**
 * The status bar item: the current notebook's pause state at a glance.
 */
import type { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { SessionModel } from '../model';
import { CommandIDs, ISession } from '../tokens';

/**
 * Construction options of {@link GpuPauseStatus}.
 */
export interface IGpuPauseStatusOptions {
  /** The model of the current notebook's session. */
  model: SessionModel;
  /** Commands run on click. */
  commands: CommandRegistry;
  /** Translation of the item's strings. */
  trans: TranslationBundle;
}

/**
 * A status bar item that shows the current notebook's session state; a click
 * pauses an active or idle session and resumes a paused one.
 */
export class GpuPauseStatus extends Widget {
  constructor(options: IGpuPauseStatusOptions) {
    super({ node: document.createElement('button') });
    this.addClass('jp-GpuPause-status');
    this.node.setAttribute('type', 'button');
    this._model = options.model;
    this._commands = options.commands;
    this._trans = options.trans;
    this._model.changed.connect(this._onModelChanged, this);
    this.node.addEventListener('click', this);
    this._render();
  }

  /**
   * Emitted when {@link isActive} may have changed.
   */
  get activeStateChanged(): ISignal<this, void> {
    return this._activeStateChanged;
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
    return this._enabled && this._model.session !== null;
  }

  /**
   * Handle DOM events of the item.
   */
  handleEvent(event: Event): void {
    if (event.type === 'click') {
      const command = this._clickCommand();
      if (command && this._commands.isEnabled(command)) {
        void this._commands.execute(command);
      }
    }
  }

  /**
   * Release the item.
   */
  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.node.removeEventListener('click', this);
    Signal.clearData(this);
    super.dispose();
  }

  private _onModelChanged(): void {
    this._render();
    this._activeStateChanged.emit();
  }

  private _clickCommand(): string | null {
    switch (this._model.session?.state) {
      case 'active':
      case 'idle':
        return CommandIDs.pause;
      case 'paused':
      case 'failed':
        return CommandIDs.resume;
      default:
        return null;
    }
  }

  private _render(): void {
    const session = this._model.session;
    this.node.textContent = session ? this._label(session).trim() : '';
    this.node.dataset.state = session?.state ?? '';
    const hint =
      this._clickCommand() === CommandIDs.pause
        ? this._trans.__('Click to pause the kernel and release its GPU.')
        : this._clickCommand() === CommandIDs.resume
          ? this._trans.__('Click to resume the kernel with its state.')
          : '';
    this.node.title = [session?.message, hint].filter(Boolean).join('\n');
  }

  private _label(session: ISession): string {
    const trans = this._trans;
    switch (session.state) {
      case 'active':
        return trans.__('GPU: active');
      case 'idle':
        return trans.__('GPU: idle');
      case 'pausing':
        return trans.__('GPU: pausing %1', Private.percent(session));
      case 'paused':
        return trans.__('GPU: paused');
      case 'waiting':
        return session.queue_position !== null
          ? trans.__('GPU: waiting (#%1)', session.queue_position)
          : trans.__('GPU: waiting');
      case 'restoring':
        return trans.__('GPU: restoring %1', Private.percent(session));
      case 'failed':
        return trans.__('GPU: failed');
      default:
        return trans.__('GPU: %1', session.state);
    }
  }

  private _activeStateChanged = new Signal<this, void>(this);
  private _commands: CommandRegistry;
  private _enabled = true;
  private _model: SessionModel;
  private _trans: TranslationBundle;
}

/**
 * Module-private helpers.
 */
namespace Private {
  /**
   * A session's progress as a percentage, or '' when unknown.
   */
  export function percent(session: ISession): string {
    const progress = session.progress;
    if (!progress || !progress.total_bytes) {
      return '';
    }
    const ratio = Math.min(1, progress.done_bytes / progress.total_bytes);
    return `${Math.round(ratio * 100)}%`;
  }
}
