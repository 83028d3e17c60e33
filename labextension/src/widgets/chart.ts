/**
 * A small bar chart of GPU-hours held and reclaimed per day, from the
 * server's `GET report`. It stays hidden until the server has the report
 * and some GPU time was recorded: an empty chart says nothing.
 */
import type { TranslationBundle } from '@jupyterlab/translation';
import { Poll } from '@lumino/polling';

import { GpuPauseAPI, GpuPauseError } from '../api';
import { IReport } from '../tokens';
import { el, setText } from './dom';

/**
 * Days shown.
 */
const DAYS = 14;

/**
 * Refresh interval of the report, in milliseconds (it changes slowly).
 */
const INTERVAL_MS = 60 * 1000;

const SVG = 'http://www.w3.org/2000/svg';

/**
 * GPU-hours held vs reclaimed over the last days.
 */
export class GpuHoursChart {
  constructor(
    private readonly _api: Pick<GpuPauseAPI, 'report'>,
    private readonly _trans: TranslationBundle
  ) {
    this.node = document.createElement('section');
    this.node.className = 'jp-GpuPause-chart';
    this.node.hidden = true;
    const title = el('h3', 'jp-GpuPause-chartTitle', this.node);
    title.textContent = _trans.__('GPU hours, last %1 days', DAYS);
    this._svg = document.createElementNS(SVG, 'svg');
    this._svg.setAttribute('role', 'img');
    this.node.appendChild(this._svg);
    // Legend: a colour swatch before each series, the numbers as text.
    this._legend = el('div', 'jp-GpuPause-legend', this.node);
    el('span', 'jp-GpuPause-swatch jp-GpuPause-bar-held', this._legend);
    this._heldText = el('span', '', this._legend);
    this._legend.appendChild(document.createTextNode(' · '));
    el('span', 'jp-GpuPause-swatch jp-GpuPause-bar-reclaimed', this._legend);
    this._reclaimedText = el('span', '', this._legend);
    this._poll = new Poll({
      auto: false,
      factory: () => this._fetch(),
      frequency: {
        interval: INTERVAL_MS,
        backoff: true,
        max: 10 * INTERVAL_MS
      },
      name: 'jupyter-gpu-pause:report',
      standby: 'when-hidden'
    });
  }

  /**
   * The chart's element.
   */
  readonly node: HTMLElement;

  /**
   * Whether the panel holding the chart is visible; polls only then.
   */
  set visible(visible: boolean) {
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
   * Stop polling.
   */
  dispose(): void {
    this._poll.dispose();
  }

  private async _fetch(): Promise<void> {
    try {
      this.render(await this._api.report(`${DAYS}d`));
    } catch (error) {
      if (error instanceof GpuPauseError && error.status === 404) {
        // The server has no report endpoint: keep the chart hidden for good.
        this._unsupported = true;
        this.node.hidden = true;
        void this._poll.stop();
        return;
      }
      throw error;
    }
  }

  /**
   * Draw a report: per day, one bar for hours held and one for reclaimed.
   */
  render(report: IReport): void {
    const trans = this._trans;
    const days = report.days.slice(-DAYS);
    const peak = Math.max(
      0,
      ...days.map(d => Math.max(d.gpu_hours_held, d.gpu_hours_reclaimed))
    );
    this.node.hidden = peak <= 0;
    if (peak <= 0) {
      return;
    }
    const width = 280;
    const height = 80;
    const slot = width / Math.max(1, days.length);
    const bar = Math.max(2, slot / 2 - 1);
    this._svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
    this._svg.setAttribute(
      'aria-label',
      trans.__(
        'GPU hours held %1, reclaimed by pauses %2',
        report.total.gpu_hours_held.toFixed(1),
        report.total.gpu_hours_reclaimed.toFixed(1)
      )
    );
    this._svg.textContent = '';
    days.forEach((day, i) => {
      const x = i * slot;
      this._bar(x, bar, day.gpu_hours_held, peak, height, 'held', day.day);
      this._bar(
        x + bar + 1,
        bar,
        day.gpu_hours_reclaimed,
        peak,
        height,
        'reclaimed',
        day.day
      );
    });
    setText(
      this._heldText,
      trans.__(
        'Held %1 h (idle %2 h)',
        report.total.gpu_hours_held.toFixed(1),
        report.total.gpu_hours_idle.toFixed(1)
      )
    );
    setText(
      this._reclaimedText,
      trans.__('reclaimed %1 h', report.total.gpu_hours_reclaimed.toFixed(1))
    );
  }

  private _bar(
    x: number,
    width: number,
    hours: number,
    peak: number,
    height: number,
    kind: 'held' | 'reclaimed',
    day: string
  ): void {
    const h = Math.round((hours / peak) * (height - 2));
    const rect = document.createElementNS(SVG, 'rect');
    rect.setAttribute('x', x.toFixed(1));
    rect.setAttribute('y', String(height - h));
    rect.setAttribute('width', width.toFixed(1));
    rect.setAttribute('height', String(h));
    rect.setAttribute('class', `jp-GpuPause-bar-${kind}`);
    const tip = document.createElementNS(SVG, 'title');
    tip.textContent =
      kind === 'held'
        ? this._trans.__('%1: %2 GPU hours held', day, hours.toFixed(2))
        : this._trans.__('%1: %2 GPU hours reclaimed', day, hours.toFixed(2));
    rect.appendChild(tip);
    this._svg.appendChild(rect);
  }

  private _heldText: HTMLSpanElement;
  private _legend: HTMLDivElement;
  private _reclaimedText: HTMLSpanElement;
  private _poll: Poll;
  private _svg: SVGSVGElement;
  private _unsupported = false;
}
