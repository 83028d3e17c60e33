/**
 * @jest-environment ./src/__tests__/jsdom-env.js
 */
/**
 * The sessions panel as a user reads it: under the summary, the pause tier
 * the server uses and why ("Pause tier: suspend in place — …"), asked once
 * of `GET capacity`; a suspended kernel counted as suspended, not paused;
 * the user's GPU-hour budget ("12.4 of 40 GPU-hours this month"), coloured
 * once warned or held, from `GET budget`.
 * The real panel, rows, model and tier line run in jsdom against a scripted
 * server.
 */
jest.mock('@jupyterlab/services', () => ({
  ServerConnection: { makeSettings: () => ({ baseUrl: '/' }) }
}));

import { Widget } from '@lumino/widgets';

import { GpuPauseError } from '../api';
import { SessionsModel } from '../model';
import { tierHint, tierText } from '../suspend/text';
import { IBudgets, ICapacity, IEvent, IPauseTier, ISession } from '../tokens';
import { BudgetLine } from '../widgets/budget';
import { GpuHoursChart } from '../widgets/chart';
import { SessionsPanel } from '../widgets/panel';
import { PauseTierLine } from '../widgets/tier';
import { makeBudget, makeHeld, makeWarned } from './budgets';
import { makeSession, makeSuspended } from './sessions';
import { trans } from './translation';
import { visibleLines } from './visible';

const SUSPEND_TIER: IPauseTier = {
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
            gpu_hours_reclaimed: 0,
            gpu_hours_unpausable: 0
          },
          until: '',
          sessions: [],
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
    capacity = async () => ({
      provider: 'nvml',
      queue_available: true,
      tier: SUSPEND_TIER
    });
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
        name: 'checkpoint' as const,
        reason: 'no CUDA driver on this machine (libcuda.so.1 not found)',
        driver_version: null
      },
      'Pause tier: checkpoint — no CUDA driver on this machine (libcuda.so.1 not found)'
    ]
  ])(
    'says under the summary which pause tier is in force: %j',
    async (tier, line) => {
      // Given a server naming its tier, and one suspended kernel beside a running one
      capacity = async () => ({
        provider: 'nvml',
        queue_available: true,
        tier
      });
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
    // (an older server's answer, off the current contract)
    capacity = async () => ({ provider: 'quota' }) as ICapacity;
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
    capacity = async () => ({
      provider: 'nvml',
      queue_available: true,
      tier: SUSPEND_TIER
    });
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
    // ('hibernate': a tier of a newer server, off this client's contract)
    expect(tierText(tier as IPauseTier, trans)).toBe(text);
    expect(tierHint(tier as IPauseTier, trans)).toMatch(hint);
  });
});

describe('the budget line in the panel', () => {
  let answer: () => Promise<IBudgets>;
  let asked: number;
  let events: IEvent[];
  let model: SessionsModel;
  let panel: SessionsPanel;
  let chart: GpuHoursChart;
  let budget: BudgetLine;

  /** Let the polls' timers and promises run. */
  async function run(): Promise<void> {
    for (let i = 0; i < 5; i++) {
      await settle();
    }
  }

  function open(user: string | null = null): HTMLElement {
    model = new SessionsModel({
      api: { listSessions: async () => [], events: async () => events },
      refreshInterval: 5
    });
    chart = new GpuHoursChart(
      {
        report: async () => ({
          since: '',
          total: {
            gpu_hours_held: 0,
            gpu_hours_idle: 0,
            gpu_hours_reclaimed: 0,
            gpu_hours_unpausable: 0
          },
          until: '',
          sessions: [],
          days: []
        })
      },
      trans
    );
    budget = new BudgetLine({
      api: {
        budget: () => {
          asked++;
          return answer();
        }
      },
      trans,
      user: () => user
    });
    panel = new SessionsPanel({
      model,
      chart,
      tier: new PauseTierLine(
        { capacity: async () => ({ provider: 'nvml' }) as ICapacity },
        trans
      ),
      budget,
      refresh: () => undefined,
      actions: { run: () => undefined, open: () => undefined },
      trans
    });
    Widget.attach(panel, document.body);
    return panel.node;
  }

  /** The budget line's element. */
  function line(node: HTMLElement): HTMLElement {
    return node.querySelector('.jp-GpuPause-budget') as HTMLElement;
  }

  beforeEach(() => {
    asked = 0;
    events = [];
    answer = async () => ({
      admin: false,
      configured: true,
      user: null,
      budgets: [makeBudget()]
    });
  });

  afterEach(() => {
    panel.dispose();
    chart.dispose();
    budget.dispose();
    model.dispose();
  });

  it("shows the user's budget under the summary, in the calm colour", async () => {
    // Given a user with 12.4 of 40 GPU-hours used this month
    // When the panel opens
    const node = open();
    await run();
    // Then one line says so, without a warning colour
    expect(visibleLines(node)).toContain('12.4 of 40 GPU-hours this month');
    expect(line(node).classList.contains('jp-GpuPause-budget-warned')).toBe(
      false
    );
    expect(line(node).classList.contains('jp-GpuPause-budget-held')).toBe(
      false
    );
    expect(line(node).title).toMatch(
      /^Your GPU-hour budget "alice"\.\nIt renews at 00:00/
    );
  });

  it('colours the line past the warning threshold, and more strongly once held', async () => {
    // Given a budget past its warning threshold
    answer = async () => ({
      admin: false,
      configured: true,
      user: null,
      budgets: [makeWarned()]
    });
    const node = open();
    await run();
    // Then the line is warn-coloured and says the share used
    expect(visibleLines(node)).toContain(
      '32.1 of 40 GPU-hours this month — 80% used'
    );
    expect(line(node).classList.contains('jp-GpuPause-budget-warned')).toBe(
      true
    );
    // When the budget is used up and the panel refreshes
    answer = async () => ({
      admin: false,
      configured: true,
      user: null,
      budgets: [makeHeld()]
    });
    (node.querySelector('.jp-GpuPause-refresh') as HTMLElement).click();
    await run();
    // Then the line is error-coloured and says until when GPUs are held
    const lines = visibleLines(node);
    const usage = lines.indexOf('40.2 of 40 GPU-hours this month — 100% used');
    expect(usage).toBeGreaterThanOrEqual(0);
    expect(lines[usage + 1]).toMatch(
      /^GPU resumes held until \d\d:\d\d.*; CPU resume still works$/
    );
    expect(line(node).classList.contains('jp-GpuPause-budget-held')).toBe(true);
    expect(line(node).classList.contains('jp-GpuPause-budget-warned')).toBe(
      false
    );
  });

  it('shows no line when no budget applies, or the server has no budgets', async () => {
    // Given a user without a budget (or exempt)
    answer = async () => ({
      admin: false,
      configured: true,
      user: null,
      budgets: []
    });
    const node = open();
    await run();
    expect(asked).toBe(1);
    expect(line(node).hidden).toBe(true);
    expect(visibleLines(node).join('\n')).not.toMatch(/GPU-hours/);
    // And a server without the endpoint is not asked again
    answer = async () => {
      throw new GpuPauseError('Not found', 404);
    };
    panel.hide();
    panel.show();
    await run();
    panel.hide();
    panel.show();
    await run();
    expect(asked).toBe(2);
    expect(line(node).hidden).toBe(true);
  });

  it("finds the admin's own budget among everyone's", async () => {
    // Given an admin, whose answer lists every user's budget
    answer = async () => ({
      admin: true,
      configured: true,
      user: null,
      budgets: [
        makeHeld({ name: 'bob', user: 'bob' }),
        makeBudget({ name: 'root', user: 'root', used_hours: 2 })
      ]
    });
    const node = open('root');
    await run();
    // Then the line is theirs, not the first listed
    const text = visibleLines(node).join('\n');
    expect(text).toContain('2 of 40 GPU-hours this month');
    expect(text).not.toMatch(/held/);
  });

  it("takes the server's user from the answer before the Lab identity", async () => {
    // Given an admin's answer naming whose server answered (a token login
    // gives the Lab an anonymous identity)
    answer = async () => ({
      admin: true,
      configured: true,
      user: 'root',
      budgets: [
        makeHeld({ name: 'bob', user: 'bob' }),
        makeBudget({ name: 'root', user: 'root', used_hours: 3 })
      ]
    });
    const node = open('anonymous-1f3a');
    await run();
    // Then the line is the server user's
    expect(visibleLines(node).join('\n')).toContain(
      '3 of 40 GPU-hours this month'
    );
  });

  it('asks again at once when a budget event arrives, not at each poll of the sessions', async () => {
    // Given the panel showing an ok budget (the first poll: history)
    const node = open();
    await model.fetch();
    await run();
    expect(asked).toBe(1);
    // When the sessions are polled again, with an event of no budget
    events = [
      {
        time: new Date().toISOString(),
        session_id: 's1',
        type: 'paused',
        reason: 'user',
        detail: {}
      }
    ];
    await model.fetch();
    await model.fetch();
    await run();
    // Then the budget is not asked again (its own poll is slow)
    expect(asked).toBe(1);
    // When the budget is held and its event arrives
    answer = async () => ({
      admin: false,
      configured: true,
      user: null,
      budgets: [makeHeld()]
    });
    events = [
      ...events,
      {
        time: new Date(Date.now() + 1000).toISOString(),
        session_id: 's1',
        type: 'budget_held',
        reason: 'budget',
        detail: { budget: 'alice', message: 'used up' }
      }
    ];
    await model.fetch();
    await run();
    // Then the line shows it at once
    expect(asked).toBe(2);
    expect(line(node).classList.contains('jp-GpuPause-budget-held')).toBe(true);
  });
});
