/**
 * The panel's line about the user's GPU-hour budget, from `GET budget`:
 * "12.4 of 40 GPU-hours this month", warned past the budget's warning
 * threshold ("— 80% used"), and once held, a second line saying until when
 * GPU resumes are held and that a CPU resume still works. No line when no
 * budget applies.
 */
import type { TranslationBundle } from '@jupyterlab/translation';
import { Poll } from '@lumino/polling';

import { GpuPauseAPI, GpuPauseError } from '../api';
import { budgetHeldText, budgetHint, budgetText } from '../budget/text';
import { IBudget, IBudgets } from '../tokens';
import { el, setText } from './dom';

/**
 * Refresh interval of the budget while the panel shows, in milliseconds:
 * that of the GPU-hours chart (hours move slowly; a `budget_*` event
 * refreshes it at once).
 */
const INTERVAL_MS = 60 * 1000;

/**
 * Construction options of {@link BudgetLine}.
 */
export interface IBudgetLineOptions {
  /** The API client. */
  api: Pick<GpuPauseAPI, 'budget'>;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
  /**
   * The user's name, to find their own budget in an admin's answer (which
   * lists every user's); `null` when unknown.
   */
  user?: () => string | null;
}

/**
 * The user's budget, in one line (two when held). Polls only while the
 * panel shows.
 */
export class BudgetLine {
  constructor(options: IBudgetLineOptions) {
    this._api = options.api;
    this._trans = options.trans;
    this._user = options.user ?? (() => null);
    this.node = document.createElement('div');
    this.node.className = 'jp-GpuPause-budget';
    this.node.hidden = true;
    this._usage = el('div', 'jp-GpuPause-budgetUsage', this.node);
    this._held = el('div', 'jp-GpuPause-budgetHeld', this.node);
    this._poll = new Poll({
      auto: false,
      factory: () => this._fetch(),
      frequency: {
        interval: INTERVAL_MS,
        backoff: true,
        max: 10 * INTERVAL_MS
      },
      name: 'jupyter-gpu-pause:budget',
      standby: 'when-hidden'
    });
  }

  /**
   * The line's element.
   */
  readonly node: HTMLDivElement;

  /**
   * Whether the panel holding the line is visible; polls only then.
   */
  set visible(visible: boolean) {
    this._visible = visible;
    if (this._unsupported || this._poll.isDisposed) {
      return;
    }
    if (visible) {
      void this._poll.start();
    } else {
      void this._poll.stop();
    }
  }

  /**
   * Ask the server now (the panel's Refresh, a `budget_*` event). Hidden,
   * it waits: showing the panel asks at once anyway.
   */
  async refresh(): Promise<void> {
    if (!this._visible || this._unsupported || this._poll.isDisposed) {
      return;
    }
    await this._poll.refresh();
    await this._poll.tick.catch(() => undefined);
  }

  /**
   * Stop polling.
   */
  dispose(): void {
    this._poll.dispose();
  }

  /**
   * Show the user's budget from an answer; `null`, or an answer without
   * their budget, hides the line.
   */
  render(answer: IBudgets | null, now: number = Date.now()): void {
    const budget = answer ? this._own(answer) : null;
    this.node.hidden = !budget;
    const state = budget?.state ?? '';
    this.node.classList.toggle('jp-GpuPause-budget-warned', state === 'warned');
    this.node.classList.toggle('jp-GpuPause-budget-held', state === 'held');
    if (!budget) {
      setText(this._usage, '');
      setText(this._held, '');
      this.node.title = '';
      delete this.node.dataset.state;
      return;
    }
    const trans = this._trans;
    this.node.dataset.state = state;
    setText(this._usage, budgetText(budget, trans));
    const held = budgetHeldText(budget, trans, now);
    setText(this._held, held);
    this._held.hidden = !held;
    this.node.title = budgetHint(budget, trans, now);
  }

  /**
   * The user's own budget: a user's answer lists theirs only; an admin's
   * lists everyone's, so theirs is found by name (the server's user, which
   * the answer names; else the Lab's identity).
   */
  private _own(answer: IBudgets): IBudget | null {
    const budgets = answer.budgets ?? [];
    if (!answer.admin) {
      return budgets[0] ?? null;
    }
    const user = answer.user ?? this._user();
    return (user && budgets.find(b => b.user === user)) || null;
  }

  private async _fetch(): Promise<void> {
    try {
      this.render(await this._api.budget());
    } catch (error) {
      if (error instanceof GpuPauseError && error.status === 404) {
        // A server without budgets: keep the line hidden for good.
        this._unsupported = true;
        this.render(null);
        void this._poll.stop();
        return;
      }
      throw error;
    }
  }

  private _api: Pick<GpuPauseAPI, 'budget'>;
  private _held: HTMLDivElement;
  private _poll: Poll;
  private _trans: TranslationBundle;
  private _unsupported = false;
  private _usage: HTMLDivElement;
  private _user: () => string | null;
  private _visible = false;
}
