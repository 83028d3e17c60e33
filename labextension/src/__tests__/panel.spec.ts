/**
 * @jest-environment ./src/__tests__/jsdom-env.js
 */
/**
 * The sessions panel as a user reads it: under the summary, the pause tier
 * the server uses and why ("Pause tier: suspend in place — …"), asked once
 * of `GET capacity`; a suspended kernel counted as suspended, not paused.
 * The real panel, rows, model and tier line run in jsdom against a scripted
 * server.
 */
jest.mock('@jupyterlab/services', () => ({
  ServerConnection: { makeSettings: () => ({ baseUrl: '/' }) }
}));

import { Widget } from '@lumino/widgets';

import { SessionsModel } from '../model';
import { tierHint, tierText } from '../suspendText';
import { ICapacity, ISession } from '../tokens';
import { GpuHoursChart } from '../widgets/chart';
import { SessionsPanel } from '../widgets/panel';
import { PauseTierLine } from '../widgets/tier';
import { makeSession, makeSuspended } from './sessions';
import { trans } from './translation';
import { visibleLines } from './visible';

const SUSPEND_TIER = {
  name: 'suspend',
  reason: 'the CUDA driver 570.86 has the checkpoint API',
  driver_version: '570.86'
};

/** Let pending promises settle. */
const settle = (): Promise<void> =>
  new Promise(resolve => setTimeout(resolve, 0));

describe('SessionsPanel', () => {
  let listed: ISession[];
  let capacity: () => Promise<ICapacity>;
  let asked: number;
  let model: SessionsModel;
  let panel: SessionsPanel;
  let chart: GpuHoursChart;

  function open(): HTMLElement {
    model = new SessionsModel({
      api: { listSessions: async () => listed, events: async () => [] },
      refreshInterval: 5
    });
    chart = new GpuHoursChart(
      {
        report: async () => ({
          since: '',
          total: {
            gpu_hours_held: 0,
            gpu_hours_idle: 0,
            gpu_hours_reclaimed: 0
          },
          days: []
        })
      },
      trans
    );
    const tier = new PauseTierLine(
      {
        capacity: () => {
          asked++;
          return capacity();
        }
      },
      trans
    );
    panel = new SessionsPanel({
      model,
      chart,
      tier,
      refresh: () => undefined,
      actions: { run: () => undefined, open: () => undefined },
      trans
    });
    Widget.attach(panel, document.body);
    return panel.node;
  }

  beforeEach(() => {
    listed = [];
    asked = 0;
    capacity = async () => ({ provider: 'nvml', tier: SUSPEND_TIER });
  });

  afterEach(() => {
    panel.dispose();
    chart.dispose();
    model.dispose();
  });

  it.each([
    [
      SUSPEND_TIER,
      'Pause tier: suspend in place — the CUDA driver 570.86 has the checkpoint API'
    ],
    [
      {
        name: 'checkpoint',
        reason: 'no CUDA driver on this machine (libcuda.so.1 not found)',
        driver_version: null
      },
      'Pause tier: checkpoint — no CUDA driver on this machine (libcuda.so.1 not found)'
    ]
  ])(
    'says under the summary which pause tier is in force: %j',
    async (tier, line) => {
      // Given a server naming its tier, and one suspended kernel beside a running one
      capacity = async () => ({ provider: 'nvml', tier });
      listed = [makeSuspended('written'), makeSession({ id: 's2' })];
      // When the panel opens
      const node = open();
      await model.fetch();
      await settle();
      // Then the summary counts the suspended kernel as suspended, not paused,
      // and the tier's line follows it, its meaning in the tooltip
      const lines = visibleLines(node);
      const summary = lines.indexOf('2 sessions · 1 suspended');
      expect(summary).toBeGreaterThanOrEqual(0);
      expect(lines[summary + 1]).toBe(line);
      const shown = node.querySelector('.jp-GpuPause-tier') as HTMLElement;
      expect(shown.dataset.tier).toBe(tier.name);
      expect(shown.title).toMatch(/^A pause /);
      expect(lines.join('\n')).not.toMatch(/paused/);
    }
  );

  it('shows no tier line for a server that names none, and asks it once', async () => {
    // Given a server without suspend in place: its capacity has no tier
    capacity = async () => ({ provider: 'quota' });
    const node = open();
    await settle();
    // Then no line says a tier
    expect(visibleLines(node).join('\n')).not.toContain('Pause tier');
    // And showing the panel again does not ask again: the tier is fixed
    panel.hide();
    panel.show();
    await settle();
    expect(asked).toBe(1);
  });

  it('asks again at the next showing when the server did not answer', async () => {
    // Given a server that cannot answer at first
    capacity = async () => {
      throw new Error('offline');
    };
    const node = open();
    await settle();
    expect(visibleLines(node).join('\n')).not.toContain('Pause tier');
    // When it answers and the panel is shown again
    capacity = async () => ({ provider: 'nvml', tier: SUSPEND_TIER });
    panel.hide();
    panel.show();
    await settle();
    // Then the line appears
    expect(visibleLines(node)).toContain(
      'Pause tier: suspend in place — the CUDA driver 570.86 has the checkpoint API'
    );
    expect(asked).toBe(2);
  });
});

describe('the pause tier line, in words', () => {
  it.each([
    [
      {
        name: 'suspend',
        reason: 'the CUDA driver 570.86 has the checkpoint API',
        driver_version: '570.86'
      },
      'Pause tier: suspend in place — the CUDA driver 570.86 has the checkpoint API',
      /releases the GPU first/
    ],
    [
      {
        name: 'checkpoint',
        reason: 'no CUDA driver on this machine (libcuda.so.1 not found)',
        driver_version: null
      },
      'Pause tier: checkpoint — no CUDA driver on this machine (libcuda.so.1 not found)',
      /writes the checkpoint, then shuts the kernel down/
    ],
    [
      { name: 'hibernate', reason: '', driver_version: null },
      'Pause tier: hibernate',
      /^$/
    ]
  ])('names the tier %j and why', (tier, text, hint) => {
    expect(tierText(tier, trans)).toBe(text);
    expect(tierHint(tier, trans)).toMatch(hint);
  });
});
