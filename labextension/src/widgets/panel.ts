/**
 * The "GPU sessions" sidebar panel: one row per tracked session, with the
 * state, what it holds, what will happen to it, and the actions that apply.
 */
import type { TranslationBundle } from '@jupyterlab/translation';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { gibibytes } from '../format';
import { SessionsModel } from '../model';
import { IEvent } from '../tokens';
import { BudgetLine } from './budget';
import { GpuHoursChart } from './chart';
import { el, setText } from './dom';
import { IRowActions, SessionRow } from './row';
import { PauseTierLine } from './tier';

/**
 * Construction options of {@link SessionsPanel}.
 */
export interface ISessionsPanelOptions {
  /** Every tracked session. */
  model: SessionsModel;
  /** What the rows' buttons do. */
  actions: IRowActions;
  /** The GPU-hours chart, shown above the list when it has data. */
  chart: GpuHoursChart;
  /** The pause tier in force, shown under the summary when the server names one. */
  tier: PauseTierLine;
  /**
   * The user's GPU-hour budget, shown under the summary when one applies;
   * none from servers without budgets.
   */
  budget?: BudgetLine;
  /** Refresh now (the header's button). */
  refresh: () => void;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
}

/**
 * The sessions panel. Rows are kept by session id and updated in place.
 */
export class SessionsPanel extends Widget {
  constructor(options: ISessionsPanelOptions) {
    super();
    const { trans } = options;
    this._options = options;
    this.addClass('jp-GpuPause-panel');
    this.title.caption = trans.__('GPU sessions');

    const header = el('div', 'jp-GpuPause-header', this.node);
    const title = el('h2', 'jp-GpuPause-title', header);
    title.textContent = trans.__('GPU sessions');
    const refresh = el('button', 'jp-GpuPause-refresh', header);
    refresh.textContent = trans.__('Refresh');
    refresh.title = trans.__('Ask the server for the sessions now');
    refresh.addEventListener('click', () => {
      options.refresh();
      void options.budget?.refresh();
    });
    this._summary = el('div', 'jp-GpuPause-summary', this.node);
    if (options.budget) {
      this.node.appendChild(options.budget.node);
    }
    this.node.appendChild(options.tier.node);
    this._banner = el('div', 'jp-GpuPause-banner', this.node);
    this._banner.setAttribute('role', 'alert');
    this.node.appendChild(options.chart.node);

    this._empty = el('div', 'jp-GpuPause-empty', this.node);
    this._empty.textContent = trans.__(
      'No sessions yet. Open a notebook and run a cell: its kernel appears here. Kernels that hold a GPU and sit idle are warned, then paused to storage so the GPU is released; Resume brings the kernel back with its variables.'
    );
    this._list = el('ul', 'jp-GpuPause-list', this.node);
    this._list.setAttribute('aria-label', trans.__('GPU sessions'));

    options.model.changed.connect(this._render, this);
    options.model.clock.connect(this._tick, this);
    options.model.eventsReceived.connect(this._onEvents, this);
    this._render();
  }

  /**
   * Release the panel.
   */
  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._options.model.changed.disconnect(this._render, this);
    this._options.model.clock.disconnect(this._tick, this);
    this._options.model.eventsReceived.disconnect(this._onEvents, this);
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    if (this.isVisible) {
      void this._options.tier.load();
      this._setBudgetVisible(true);
    }
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._options.chart.visible = true;
    this._setBudgetVisible(true);
    void this._options.tier.load();
    this._render();
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._options.chart.visible = false;
    this._setBudgetVisible(false);
  }

  protected onBeforeDetach(msg: Message): void {
    this._setBudgetVisible(false);
    super.onBeforeDetach(msg);
  }

  private _setBudgetVisible(visible: boolean): void {
    if (this._options.budget) {
      this._options.budget.visible = visible;
    }
  }

  /**
   * A budget was warned, held or granted more hours: show it at once
   * rather than at the budget's next poll.
   */
  private _onEvents(_: SessionsModel, events: IEvent[]): void {
    if (events.some(e => e.type.startsWith('budget_'))) {
      void this._options.budget?.refresh();
    }
  }

  /**
   * Countdowns and times waited move every second; nothing else changes
   * without a poll (a wait's poll answers the same until the queue moves).
   */
  private _tick(): void {
    if (!this.isVisible) {
      return;
    }
    const now = Date.now();
    for (const session of this._options.model.sessions) {
      if (session.pause_at !== null || session.state === 'waiting') {
        this._rows.get(session.id)?.update(session, now);
      }
    }
  }

  private _render(): void {
    const { model, trans, actions } = this._options;
    const sessions = model.sessions;
    const now = Date.now();

    const banner =
      model.availability === 'missing'
        ? trans.__(
            'The jupyter_gpu_pause server extension is not enabled on this server, so kernels cannot be paused. Enable it with "jupyter server extension enable jupyter_gpu_pause" and restart the server.'
          )
        : model.lastError
          ? trans.__('Cannot refresh: %1 Retrying…', model.lastError)
          : '';
    setText(this._banner, banner);
    this._banner.hidden = !banner;

    const seen = new Set<string>();
    let previous: HTMLElement | null = null;
    for (const session of sessions) {
      seen.add(session.id);
      let row = this._rows.get(session.id);
      if (row) {
        row.update(session, now);
      } else {
        row = new SessionRow(session, actions, trans);
        this._rows.set(session.id, row);
      }
      // Keep the server's order, moving a node only when it is out of place.
      const expected: ChildNode | null = previous
        ? previous.nextSibling
        : this._list.firstChild;
      if (expected !== row.node) {
        this._list.insertBefore(row.node, expected);
      }
      previous = row.node;
    }
    for (const [id, row] of this._rows) {
      if (!seen.has(id)) {
        row.node.remove();
        this._rows.delete(id);
      }
    }
    this._empty.hidden =
      sessions.length > 0 || model.availability === 'missing';
    this._list.hidden = sessions.length === 0;
    setText(this._summary, this._summaryText());
  }

  private _summaryText(): string {
    const { model, trans } = this._options;
    const sessions = model.sessions;
    if (!sessions.length) {
      return '';
    }
    const holding = sessions.filter(s => (s.gpu?.memory_bytes ?? 0) > 0);
    const memory = holding.reduce(
      (sum, s) => sum + (s.gpu?.memory_bytes ?? 0),
      0
    );
    const paused = sessions.filter(s => s.state === 'paused').length;
    const suspended = sessions.filter(s => s.state === 'suspended').length;
    const parts = [trans._n('%1 session', '%1 sessions', sessions.length)];
    if (holding.length) {
      parts.push(
        trans._n(
          '%1 holds a GPU (%2)',
          '%1 hold GPUs (%2)',
          holding.length,
          gibibytes(memory)
        )
      );
    }
    if (suspended) {
      parts.push(trans._n('%1 suspended', '%1 suspended', suspended));
    }
    if (paused) {
      parts.push(trans._n('%1 paused', '%1 paused', paused));
    }
    return parts.join(' · ');
  }

  private _banner: HTMLDivElement;
  private _empty: HTMLDivElement;
  private _list: HTMLUListElement;
  private _options: ISessionsPanelOptions;
  private _rows = new Map<string, SessionRow>();
  private _summary: HTMLDivElement;
}
