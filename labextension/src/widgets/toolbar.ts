/**
 * The notebook toolbar item: the notebook's pause state as a button that
 * does the obvious next thing — "Pause", "Pausing 42%", "Paused — Resume",
 * "Waiting for GPU · #2", "Suspended — Resume" — or says what the kernel
 * is busy with ("Rebuilding: cell 2 of 3"). A paused notebook says so here
 * instead of a bare "No Kernel"; a suspended one is never called paused: its
 * kernel lives on.
 */
import { NotebookPanel } from '@jupyterlab/notebook';
import type { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { Widget } from '@lumino/widgets';

import { isCapacityTimeout, primaryCommand, suspendPhase } from '../actions';
import {
  countdownText,
  errorText,
  progressRatio,
  rebuildingText,
  secondsUntil,
  waitingLabel,
  waitReasonText
} from '../format';
import { SessionsModel } from '../model';
import {
  resumeInPlaceHint,
  suspendedLabel,
  suspendedMessage
} from '../suspend/text';
import { notebookPath } from '../target';
import { CommandIDs, ISession } from '../tokens';
import { cannotPauseText, unpausable } from '../unpausable/text';
import { setText } from './dom';

/**
 * Construction options of {@link NotebookStateButton}.
 */
export interface INotebookStateButtonOptions {
  /** The notebook the button belongs to. */
  panel: NotebookPanel;
  /** Every tracked session. */
  model: SessionsModel;
  /** Runs the button's command. */
  commands: CommandRegistry;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
}

/**
 * A toolbar button showing one notebook's session state.
 */
export class NotebookStateButton extends Widget {
  constructor(options: INotebookStateButtonOptions) {
    super({ node: document.createElement('button') });
    this._options = options;
    this.addClass('jp-GpuPause-toolbarButton');
    this.node.setAttribute('type', 'button');
    this.node.addEventListener('click', () => this._click());
    options.model.changed.connect(this._render, this);
    options.model.clock.connect(this._render, this);
    options.panel.sessionContext.sessionChanged.connect(this._render, this);
    this._render();
  }

  /**
   * Release the button.
   */
  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    const { model, panel } = this._options;
    model.changed.disconnect(this._render, this);
    model.clock.disconnect(this._render, this);
    panel.sessionContext.sessionChanged.disconnect(this._render, this);
    super.dispose();
  }

  private get _session(): ISession | null {
    const { model, panel } = this._options;
    return model.byPath(notebookPath(panel));
  }

  private _click(): void {
    const session = this._session;
    const command = session ? primaryCommand(session) : null;
    if (session && command) {
      void this._options.commands.execute(command, { sessionId: session.id });
    }
  }

  private _render(): void {
    const session = this._session;
    const node = this.node as HTMLButtonElement;
    if (!session) {
      this.hide();
      return;
    }
    this.show();
    node.dataset.state = session.state;
    node.dataset.suspend = suspendPhase(session) ?? '';
    node.disabled = primaryCommand(session) === null;
    setText(node, this._label(session));
    const { trans } = this._options;
    const hint: Record<string, string> = {
      [CommandIDs.pause]: trans.__(
        'Save the kernel state to storage and release the GPU'
      ),
      [CommandIDs.resume]:
        session.state === 'suspended'
          ? resumeInPlaceHint(trans)
          : session.open_kernel
            ? trans.__(
                'Restore the saved variables into the kernel this notebook has open (it has run nothing yet)'
              )
            : trans.__('Start a kernel and restore the saved variables'),
      [CommandIDs.cancel]:
        session.state === 'waiting'
          ? trans.__('Leave the queue; the session stays paused.')
          : trans.__('Stop the pause; the kernel keeps running.')
    };
    const command = primaryCommand(session);
    const detail =
      session.state === 'failed'
        ? errorText(session.error, trans)
        : session.state === 'waiting'
          ? session.message || waitReasonText(session, trans)
          : session.state === 'suspended'
            ? suspendedMessage(session, trans, Date.now())
            : cannotPauseText(session, trans) || session.message;
    node.title = [detail, command ? hint[command] : '']
      .filter(Boolean)
      .join('\n');
  }

  private _label(session: ISession): string {
    const { trans } = this._options;
    const ratio = progressRatio(session);
    const percent = ratio === null ? '' : ` ${Math.round(ratio * 100)}%`;
    switch (session.state) {
      case 'active':
      case 'idle': {
        const rebuilding = rebuildingText(session, trans);
        if (rebuilding) {
          return rebuilding; // no pause until the re-run ends
        }
        const left = secondsUntil(session.pause_at, Date.now());
        if (unpausable(session)) {
          // said plainly; a policy may shut it down instead of pausing it
          return left === null
            ? trans.__('Cannot be paused')
            : trans.__(
                'Cannot be paused · shuts down in %1',
                countdownText(left)
              );
        }
        return left === null
          ? trans.__('Pause GPU kernel')
          : trans.__('Pause · pauses in %1', countdownText(left));
      }
      case 'pausing':
        return trans.__('Pausing…%1', percent);
      case 'suspended':
        return suspendedLabel(session, trans);
      case 'paused':
        return trans.__('Paused — Resume');
      case 'waiting':
        return waitingLabel(session, trans);
      case 'restoring':
        return trans.__('Restoring…%1', percent);
      case 'failed':
        if (isCapacityTimeout(session)) {
          return trans.__('No GPU free — Resume');
        }
        return session.checkpoint
          ? trans.__('Failed — Resume')
          : trans.__('Pause failed');
      default:
        return session.state;
    }
  }

  private _options: INotebookStateButtonOptions;
}
