/**
 * One row of the sessions panel. A row keeps its DOM nodes and only writes
 * what changed, so a poll every second over a hundred rows neither flickers
 * nor steals the focus from a button.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import { ambientRestoreText } from '../ambient/text';
import {
  isRebuilding,
  rebuildOffer,
  sessionActions,
  suspendPhase
} from '../actions';
import {
  ageText,
  bytesText,
  countdownText,
  durationText,
  errorText,
  gibibytes,
  gpuText,
  placeText,
  progressRatio,
  progressText,
  queueText,
  rebuildingText,
  secondsUntil,
  stateLabel,
  waitReasonText
} from '../format';
import { cellLabel, cellLines, offerText } from '../rebuild/text';
import {
  resumeInPlaceHint,
  suspendedDetails,
  suspendedMessage
} from '../suspend/text';
import { CommandIDs, IRebuildPlan, ISession } from '../tokens';
import { cannotPauseText, unpausable } from '../unpausable/text';
import { el, setText } from './dom';

/**
 * What a row's buttons do.
 */
export interface IRowActions {
  /** Run a session command on this row's session. */
  run(command: string, sessionId: string): void;
  /** Open the row's notebook. */
  open(path: string): void;
}

/**
 * A session row: path, state badge, details, progress, message, the
 * rebuild offer of a resumed kernel, actions.
 */
export class SessionRow {
  constructor(
    session: ISession,
    private readonly _actions: IRowActions,
    private readonly _trans: TranslationBundle
  ) {
    const node = document.createElement('li');
    node.className = 'jp-GpuPause-row';
    node.dataset.sessionId = session.id;
    this.node = node;

    const head = el('div', 'jp-GpuPause-rowHead', node);
    this._path = el('button', 'jp-GpuPause-path', head);
    this._path.addEventListener('click', () =>
      this._actions.open(this._session.path)
    );
    this._badge = el('span', 'jp-GpuPause-badge', head);
    this._dir = el('div', 'jp-GpuPause-dir', node);

    this._details = el('div', 'jp-GpuPause-details', node);
    this._progress = el('div', 'jp-GpuPause-progress', node);
    this._bar = el('progress', 'jp-GpuPause-bar', this._progress);
    this._bar.max = 1;
    this._bar.setAttribute('aria-label', _trans.__('Progress'));
    this._progressText = el('span', 'jp-GpuPause-progressText', this._progress);
    this._message = el('div', 'jp-GpuPause-message', node);
    this._rebuild = el('div', 'jp-GpuPause-rebuild', node);
    this._rebuild.hidden = true;
    this._buttons = el('div', 'jp-GpuPause-actions', node);

    this._session = session;
    this.update(session, Date.now());
  }

  /**
   * The row's element.
   */
  readonly node: HTMLLIElement;

  /**
   * Show a session's latest state; `now` drives countdowns and ages.
   */
  update(session: ISession, now: number): void {
    this._session = session;
    const trans = this._trans;
    // The file name reads at a glance; its folder goes below, in small type.
    const slash = session.path.lastIndexOf('/');
    setText(this._path, session.path.slice(slash + 1));
    setText(this._dir, slash > 0 ? session.path.slice(0, slash) : '');
    this._dir.hidden = slash <= 0;
    this._path.title = trans.__('Open %1', session.path);
    this.node.dataset.state = session.state;
    this._badge.dataset.state = session.state;
    const suspend = suspendPhase(session);
    this._badge.dataset.suspend = suspend ?? '';
    setText(this._badge, stateLabel(session.state, trans));

    setText(this._details, this._detailsText(session, now));

    const ratio = progressRatio(session);
    const rebuilding = isRebuilding(session);
    // A suspended kernel's checkpoint is written as a pause's is.
    const busy =
      session.state === 'pausing' ||
      session.state === 'restoring' ||
      suspend === 'writing' ||
      rebuilding;
    this._progress.hidden = !busy && session.state !== 'waiting';
    if (session.state === 'waiting') {
      // Where it stands and how long it has waited; the reason is the
      // message below. No bar and no ETA: a queue has no known end.
      this._bar.hidden = true;
      setText(
        this._progressText,
        queueText(session, trans, now) || trans.__('Waiting for a GPU')
      );
    } else if (busy) {
      this._bar.hidden = false;
      if (ratio === null) {
        this._bar.removeAttribute('value');
      } else {
        this._bar.value = ratio;
      }
      const phase = session.progress?.phase ?? '';
      setText(
        this._progressText,
        rebuilding
          ? rebuildingText(session, trans)
          : [phase, progressText(session, trans)].filter(Boolean).join(' · ')
      );
    }

    const error = session.error ? errorText(session.error, trans) : '';
    // A suspended kernel whose checkpoint failed still holds every
    // variable: a warning, not an error.
    this._message.classList.toggle('jp-GpuPause-error', !!error && !suspend);
    this._message.classList.toggle('jp-GpuPause-warning', suspend === 'failed');
    setText(this._message, this._messageText(session, error, now));
    this._message.hidden = !this._message.textContent;

    this._renderRebuild(session);
    this._renderButtons(session);
  }

  /**
   * The row's sentence. A running session's server message restates what
   * the details line shows, so the row says what matters instead: why the
   * last pause failed, or what the last resume restored and what not (of
   * the variables and of the kernel's ambient state).
   */
  private _messageText(session: ISession, error: string, now: number): string {
    const trans = this._trans;
    if (session.state === 'failed') {
      return error;
    }
    if (session.state === 'suspended') {
      return suspendedMessage(session, trans, now);
    }
    if (session.state === 'waiting') {
      // The server's reason, with its numbers, as it wrote it.
      return session.message || waitReasonText(session, trans);
    }
    if (session.state !== 'active' && session.state !== 'idle') {
      return session.message ?? '';
    }
    const cannot = cannotPauseText(session, trans);
    if (cannot) {
      return cannot; // said plainly, in place of the failure that taught it
    }
    if (error) {
      return trans.__('The last pause failed: %1', error);
    }
    const restore = session.restore;
    if (!restore?.restored) {
      return '';
    }
    let text = trans._n(
      'Restored %1 object: %2.',
      'Restored %1 objects: %2.',
      restore.restored.length,
      restore.restored.join(', ')
    );
    if (restore.failed?.length) {
      text +=
        ' ' +
        trans.__(
          'Not restored: %1.',
          restore.failed.map(f => `${f.name} (${f.reason})`).join('; ')
        );
    }
    // The kernel's ambient state: its sentence, and what did not come back.
    const ambient = ambientRestoreText(restore.ambient, trans);
    return ambient ? `${text} ${ambient}` : text;
  }

  private _detailsText(session: ISession, now: number): string {
    const trans = this._trans;
    const parts: string[] = [];
    const gpu = gpuText(session, trans);
    const running = session.state === 'active' || session.state === 'idle';
    const place = running ? placeText(session, trans) : '';
    if (gpu || place) {
      parts.push(gpu || place);
    }
    if (session.state === 'suspended') {
      parts.push(...suspendedDetails(session, trans));
    }
    if (session.state === 'idle' && session.idle_seconds !== null) {
      parts.push(
        trans.__('idle %1', durationText(session.idle_seconds, trans))
      );
    }
    const left = secondsUntil(session.pause_at, now);
    if (left !== null) {
      // a policy shuts a kernel that cannot be paused down instead
      parts.push(
        unpausable(session)
          ? trans.__('shuts down in %1', countdownText(left))
          : trans.__('pauses in %1', countdownText(left))
      );
    }
    const cp = session.checkpoint;
    if (cp) {
      parts.push(
        trans.__(
          'checkpoint %1, %2',
          bytesText(cp.bytes),
          ageText(cp.created, trans, now)
        )
      );
    }
    const needs =
      session.state === 'waiting' ? session.waiting?.needs_bytes : 0;
    if (needs) {
      parts.push(trans.__('needs %1 of GPU memory', gibibytes(needs)));
    }
    return parts.join(' · ');
  }

  /**
   * What the last resume did not bring back and, before anything runs, the
   * cells a rebuild would re-run, each with its first line; what cannot be
   * rebuilt, with why. Hidden while a rebuild runs (the progress shows it)
   * and once nothing is missing.
   */
  private _renderRebuild(session: ISession): void {
    const running = session.state === 'active' || session.state === 'idle';
    const plan = session.restore?.rebuild;
    const shown =
      running &&
      !isRebuilding(session) &&
      !!plan &&
      (plan.names?.length > 0 || plan.unbuildable?.length > 0);
    const key = shown ? JSON.stringify(plan) : '';
    if (key === this._rebuildKey) {
      return;
    }
    this._rebuildKey = key;
    this._rebuild.textContent = '';
    this._rebuild.hidden = !shown;
    if (!shown || !plan) {
      return;
    }
    const failed = (session.restore?.failed ?? []).map(f => f.name);
    const text = el('div', 'jp-GpuPause-rebuildText', this._rebuild);
    text.textContent = offerText(plan, failed, this._trans);
    if (plan.names.length) {
      this._renderCells(plan);
    }
  }

  private _renderCells(plan: IRebuildPlan): void {
    const list = el('ol', 'jp-GpuPause-cells', this._rebuild);
    list.setAttribute('aria-label', this._trans.__('Cells to re-run'));
    for (const cell of plan.cells) {
      const item = el('li', 'jp-GpuPause-cell', list);
      const label = el('span', 'jp-GpuPause-cellLabel', item);
      label.textContent = cellLabel(cell);
      const code = el('code', 'jp-GpuPause-cellCode', item);
      code.textContent = cell.code ?? '';
      code.title = cell.code ?? '';
    }
  }

  private _renderButtons(session: ISession): void {
    const wanted = sessionActions(session);
    // Labels and hints depend on the state too ("Resume on CPU now"), and
    // the rebuild's hint on its plan.
    const plan = rebuildOffer(session);
    const key = `${session.state} ${wanted.join(' ')} ${plan ? cellLines(plan) : ''}`;
    if (key === this._buttonsKey) {
      return;
    }
    this._buttonsKey = key;
    this._buttons.textContent = '';
    for (const command of wanted) {
      const button = el('button', 'jp-GpuPause-action', this._buttons);
      button.dataset.command = command;
      button.textContent = this._label(command, session);
      button.title = this._hint(command, session);
      if (command === CommandIDs.discard) {
        button.classList.add('jp-mod-warn');
      } else if (command === CommandIDs.rebuild) {
        button.classList.add('jp-mod-accept');
      }
      button.addEventListener('click', () =>
        this._actions.run(command, this._session.id)
      );
    }
  }

  private _label(command: string, session: ISession): string {
    const trans = this._trans;
    switch (command) {
      case CommandIDs.pause:
        return trans.__('Pause');
      case CommandIDs.resume:
        return trans.__('Resume');
      case CommandIDs.resumeCpu:
        return session.state === 'waiting'
          ? trans.__('Resume on CPU now')
          : trans.__('Resume on CPU');
      case CommandIDs.cancel:
        return trans.__('Cancel');
      case CommandIDs.keepRunning:
        return trans.__('Keep running');
      case CommandIDs.discard:
        return trans.__('Discard');
      case CommandIDs.rebuild:
        return trans.__('Re-run cells');
      default:
        return command;
    }
  }

  /**
   * A button's tooltip, where its label alone leaves a doubt: what a CPU
   * resume does with GPU tensors, and what leaving the queue keeps.
   */
  private _hint(command: string, session: ISession): string {
    const trans = this._trans;
    const gpuBytes = session.checkpoint?.gpu_bytes ?? 0;
    switch (command) {
      case CommandIDs.resume:
        return session.state === 'suspended' ? resumeInPlaceHint(trans) : '';
      case CommandIDs.resumeCpu: {
        const tensors = gpuBytes
          ? ' ' +
            trans.__(
              'Its GPU tensors (%1) are restored into CPU memory.',
              bytesText(gpuBytes)
            )
          : '';
        return session.state === 'waiting'
          ? trans.__('Leave the queue and resume without a GPU now.') + tensors
          : trans.__('Resume without a GPU.') + tensors;
      }
      case CommandIDs.cancel:
        return session.state === 'waiting'
          ? trans.__('Leave the queue; the session stays paused.')
          : trans.__('Stop the pause; the kernel keeps running.');
      case CommandIDs.rebuild: {
        const plan = rebuildOffer(session);
        return plan
          ? trans.__(
              'Re-run, in this order (what was restored is not changed):\n%1',
              cellLines(plan)
            )
          : '';
      }
      default:
        return '';
    }
  }

  private _badge: HTMLSpanElement;
  private _bar: HTMLProgressElement;
  private _buttons: HTMLDivElement;
  private _buttonsKey = '';
  private _details: HTMLDivElement;
  private _dir: HTMLDivElement;
  private _message: HTMLDivElement;
  private _path: HTMLButtonElement;
  private _progress: HTMLDivElement;
  private _progressText: HTMLSpanElement;
  private _rebuild: HTMLDivElement;
  private _rebuildKey = '';
  private _session: ISession;
}
