/**
 * The panel's line about the pause tier in force on this server, from
 * `GET capacity`: "Pause tier: suspend in place — the CUDA driver 570.86 has
 * the checkpoint API", or "Pause tier: checkpoint — no CUDA driver on this
 * machine (libcuda.so.1 not found)". It tells a user whether a pause will
 * keep the kernel alive (suspended) or shut it down, and why.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import { GpuPauseAPI } from '../api';
import { tierHint, tierText } from '../suspend/text';
import { IPauseTier } from '../tokens';

/**
 * One line naming the pause tier; hidden until the server names one (a
 * server without suspend in place never does).
 */
export class PauseTierLine {
  constructor(
    private readonly _api: Pick<GpuPauseAPI, 'capacity'>,
    private readonly _trans: TranslationBundle
  ) {
    this.node = document.createElement('div');
    this.node.className = 'jp-GpuPause-tier';
    this.node.hidden = true;
  }

  /**
   * The line's element.
   */
  readonly node: HTMLDivElement;

  /**
   * Ask the server once: the tier is chosen when the server starts and does
   * not change while it runs. A failed answer (server busy, not reachable)
   * leaves the line hidden and is asked again at the next call.
   */
  async load(): Promise<void> {
    if (this._loaded || this._loading) {
      return;
    }
    this._loading = true;
    try {
      const capacity = await this._api.capacity();
      this._loaded = true;
      this.render(capacity.tier ?? null);
    } catch {
      this.render(null);
    } finally {
      this._loading = false;
    }
  }

  /**
   * Show a tier; `null` hides the line.
   */
  render(tier: IPauseTier | null): void {
    const name = typeof tier?.name === 'string' ? tier.name : '';
    this.node.hidden = !tier || !name;
    if (!tier || !name) {
      this.node.textContent = '';
      this.node.title = '';
      delete this.node.dataset.tier;
      return;
    }
    this.node.dataset.tier = name;
    this.node.textContent = tierText(tier, this._trans);
    this.node.title = tierHint(tier, this._trans);
  }

  private _loaded = false;
  private _loading = false;
}
