/**
 * @jest-environment ./src/__tests__/jsdom-env.js
 */
/**
 * A panel row as a user reads it: a resume waiting for a GPU says why, where
 * it stands in line and how long it has waited, and offers to leave the
 * queue or to go on the CPU; a paused session offers the CPU only when its
 * checkpoint holds GPU tensors.
 */
import { button, visibleButtons, visibleLines } from './visible';

import { SessionRow } from '../widgets/row';
import { CommandIDs } from '../tokens';
import {
  makeCheckpoint,
  makeSession,
  makeSuspended,
  makeWaiting
} from './sessions';
import { trans } from './translation';

const NOW = Date.parse('2026-12-02T10:00:00Z');
const THREE_MIN_AGO = '2026-12-02T09:57:00Z';
// 14:05 on the user's clock, whatever the time zone the tests run in.
const AT_14_05 = new Date(2026, 11, 2, 14, 5).toISOString();

function labels(row: SessionRow): string[] {
  return visibleButtons(row.node as unknown as HTMLElement).map(
    b => b.textContent
  );
}

function lines(row: SessionRow): string[] {
  return visibleLines(row.node as unknown as HTMLElement);
}

describe('SessionRow', () => {
  let ran: [string, string][];
  const actions = {
    run: (command: string, sessionId: string) => ran.push([command, sessionId]),
    open: () => undefined
  };

  beforeEach(() => {
    ran = [];
  });

  it('shows why a resume waits, its place in line and the time waited', () => {
    // Given a resume waiting for three minutes, second in line
    const session = makeWaiting(THREE_MIN_AGO);
    const row = new SessionRow(session, actions, trans);
    // When the panel renders it
    row.update(session, NOW);
    // Then the user reads the server's reason as is, the position and the wait
    expect(lines(row)).toEqual(
      expect.arrayContaining([
        'train.ipynb',
        'waiting',
        '#2 in line · waiting 3 min',
        'Waiting for a GPU (#2 in line): the limit of 1 GPU session on this machine is in use'
      ])
    );
    // And what it needs, but never a promise of when
    expect(lines(row).join('\n')).toContain('needs 14.0 GiB of GPU memory');
    expect(lines(row).join('\n')).not.toMatch(/ETA|remaining|expected/i);
  });

  it('counts the time waited on as the panel re-renders', () => {
    const session = makeWaiting(THREE_MIN_AGO);
    const row = new SessionRow(session, actions, trans);
    row.update(session, NOW);
    // When the same snapshot renders 7 minutes later
    row.update(session, NOW + 7 * 60 * 1000);
    // Then the wait reads 10 min
    expect(lines(row)).toContain('#2 in line · waiting 10 min');
  });

  it('says what it can when the server gives no position, start or message', () => {
    // Given an older server: a waiting state without the new fields
    const session = makeSession({ state: 'waiting', kernel_id: null });
    const row = new SessionRow(session, actions, trans);
    row.update(session, NOW);
    expect(lines(row)).toContain('Waiting for a GPU');
    // And a newer server's reason code alone still reads as a sentence
    const coded = makeWaiting(THREE_MIN_AGO, {
      message: null,
      queue_position: 1
    });
    coded.waiting!.reason = 'gpu-memory';
    row.update(coded, NOW);
    expect(lines(row)).toEqual(
      expect.arrayContaining([
        '#1 in line · waiting 3 min',
        'Waiting for a GPU: no GPU has enough free memory'
      ])
    );
  });

  it('offers Cancel and Resume on CPU now while waiting, each running its command', () => {
    const session = makeWaiting(THREE_MIN_AGO);
    const row = new SessionRow(session, actions, trans);
    row.update(session, NOW);
    const node = row.node as unknown as HTMLElement;
    expect(labels(row)).toEqual(['train.ipynb', 'Cancel', 'Resume on CPU now']);
    // When the user clicks each
    button(node, 'Cancel').click();
    button(node, 'Resume on CPU now').click();
    // Then the row runs Cancel, then Resume on CPU, on its session
    expect(ran).toEqual([
      [CommandIDs.cancel, 's1'],
      [CommandIDs.resumeCpu, 's1']
    ]);
    // And the buttons say what they keep and what they do with GPU tensors
    expect(button(node, 'Cancel').title).toBe(
      'Leave the queue; the session stays paused.'
    );
    expect(button(node, 'Resume on CPU now').title).toBe(
      'Leave the queue and resume without a GPU now. Its GPU tensors (4.0 GB) are restored into CPU memory.'
    );
  });

  it.each([
    ['GPU tensors', ['Resume', 'Resume on CPU', 'Discard'], 4_000_000_000],
    ['no GPU tensors', ['Resume', 'Discard'], 0]
  ])(
    'offers a paused session with %s the buttons %j',
    (_, expected, gpuBytes) => {
      // Given a paused session whose checkpoint holds gpuBytes of GPU tensors
      const session = makeSession({
        state: 'paused',
        kernel_id: null,
        checkpoint: makeCheckpoint(6_100_000_000, gpuBytes as number)
      });
      const row = new SessionRow(session, actions, trans);
      row.update(session, NOW);
      // Then a CPU resume is offered only when it is a real choice
      expect(labels(row).slice(1)).toEqual(expected);
    }
  );

  it('offers nothing for a session another server runs, and says where it runs', () => {
    // Given a session paused here and resumed on another node since
    const session = makeSession({
      state: 'paused',
      kernel_id: null,
      checkpoint: makeCheckpoint(6_100_000_000, 4_000_000_000),
      running_elsewhere: 'ada@gpu-node-2:8888',
      message:
        'Running on ada@gpu-node-2:8888: resumed there. Open it there, or pause it there first'
    });
    const row = new SessionRow(session, actions, trans);
    row.update(session, NOW);
    expect(labels(row).slice(1)).toEqual([]);
    expect(lines(row).join(' ')).toContain('Running on ada@gpu-node-2:8888');
  });

  it('runs Resume on CPU for a paused session', () => {
    const session = makeSession({
      state: 'paused',
      kernel_id: null,
      checkpoint: makeCheckpoint(6_100_000_000, 4_000_000_000)
    });
    const row = new SessionRow(session, actions, trans);
    row.update(session, NOW);
    button(row.node as unknown as HTMLElement, 'Resume on CPU').click();
    expect(ran).toEqual([[CommandIDs.resumeCpu, 's1']]);
  });

  it('says a wait that timed out left the checkpoint intact, and offers to resume again', () => {
    // Given a resume that waited past the limit
    const session = makeSession({
      state: 'failed',
      kernel_id: null,
      checkpoint: makeCheckpoint(6_100_000_000, 4_000_000_000),
      error: {
        reason: 'capacity-timeout',
        state_intact: true,
        message:
          'no GPU became free within 30 min; your checkpoint is intact — Resume to try again'
      }
    });
    const row = new SessionRow(session, actions, trans);
    row.update(session, NOW);
    expect(lines(row)).toContain(
      'No GPU became free within 30 min; your checkpoint is intact — Resume to try again.'
    );
    expect(labels(row).slice(1)).toEqual([
      'Resume',
      'Resume on CPU',
      'Discard'
    ]);
  });

  it.each([
    ['the CPU', 'cpu', 'on CPU'],
    ['a GPU not measured (no NVML)', 'gpu', 'on GPU']
  ] as const)(
    'tells a kernel a resume placed on %s from an unplaced one',
    (_, device, text) => {
      const session = makeSession({ state: 'active', device });
      const row = new SessionRow(session, actions, trans);
      row.update(session, NOW);
      expect(lines(row)).toContain(text);
      const unplaced = makeSession({ state: 'active', device: null });
      row.update(unplaced, NOW);
      expect(lines(row)).not.toContain(text);
    }
  );

  it('offers the rebuild of a resumed kernel: what is missing, each cell, and Re-run cells', () => {
    // Given a kernel resumed without `batches` and `h`, and a plan for them
    const session = makeSession({
      restore: {
        restored: ['data', 'hashlib', 'model'],
        failed: [],
        rebuild: {
          names: ['batches', 'h'],
          cells: [
            { execution_count: 3, seconds: 0.001, code: "model = {'w': 0}" },
            {
              execution_count: 5,
              seconds: 0,
              code: "h = hashlib.sha256(b'abc')"
            }
          ],
          seconds: 0.001,
          unbuildable: [
            { name: 'g', reason: 'its cell is marked gp-no-rerun' }
          ],
          text: null,
          problem: null
        }
      }
    });
    const row = new SessionRow(session, actions, trans);
    row.update(session, NOW);
    const node = row.node as unknown as HTMLElement;
    // Then the row says what is missing, the plan and what cannot come back
    expect(lines(row)).toEqual(
      expect.arrayContaining([
        'Restored 3 objects: data, hashlib, model.',
        '`batches`, `h` were not saved. Re-run cells [3], [5] (0.0 s) to rebuild them. Cannot rebuild `g`: its cell is marked gp-no-rerun.',
        '[3]',
        "model = {'w': 0}",
        '[5]',
        "h = hashlib.sha256(b'abc')"
      ])
    );
    // And offers Re-run cells first, which runs the rebuild on its session
    expect(labels(row).slice(1)).toEqual(['Re-run cells', 'Pause']);
    button(node, 'Re-run cells').click();
    expect(ran).toEqual([[CommandIDs.rebuild, 's1']]);

    // When the rebuild runs, the row counts cells, never bytes, and offers nothing
    const rebuilding = {
      ...session,
      progress: {
        phase: 'rebuilding',
        done_bytes: 1,
        total_bytes: 2,
        unit: 'cells' as const
      }
    };
    row.update(rebuilding, NOW);
    expect(lines(row)).toContain('Rebuilding: cell 2 of 2');
    expect(lines(row).join('\n')).not.toMatch(/\d B\b|kB|MB|rebuilding ·/);
    expect(lines(row).join('\n')).not.toContain('were not saved');
    expect(labels(row).slice(1)).toEqual([]);

    // And once everything is back the offer is gone
    const done = {
      ...session,
      restore: { ...session.restore!, rebuild: null }
    };
    row.update(done, NOW);
    expect(lines(row).join('\n')).not.toContain('Re-run');
    expect(labels(row).slice(1)).toEqual(['Pause']);
  });

  describe('of a suspended kernel', () => {
    function parts(row: SessionRow) {
      const node = row.node as unknown as HTMLElement;
      const q = (selector: string) =>
        node.querySelector(selector) as HTMLElement;
      return {
        badge: q('.jp-GpuPause-badge'),
        bar: q('.jp-GpuPause-bar') as HTMLProgressElement,
        progress: q('.jp-GpuPause-progress'),
        message: q('.jp-GpuPause-message')
      };
    }

    it('shows the checkpoint being written as a pause shows it, and offers Resume in place', () => {
      // Given a kernel suspended 0.9 s ago, a quarter of its checkpoint written
      const session = makeSuspended('writing');
      const row = new SessionRow(session, actions, trans);
      row.update(session, NOW);
      const { badge, bar, progress, message } = parts(row);
      // Then the badge says suspended, calm (not an error, not a warning)
      expect(badge.textContent).toBe('suspended');
      expect(badge.dataset).toMatchObject({
        state: 'suspended',
        suspend: 'writing'
      });
      // And the row gives the release, the host memory and the server's sentence
      expect(lines(row)).toEqual(
        expect.arrayContaining([
          'GPU released in 0.9 s · 12.4 GB in host memory',
          'Suspended — GPU released in 0.9 s; writing checkpoint'
        ])
      );
      expect(message.className).toBe('jp-GpuPause-message');
      // And the progress bar and bytes, as while pausing
      expect(progress.hidden).toBe(false);
      expect(bar.hidden).toBe(false);
      expect(bar.value).toBeCloseTo(0.25);
      expect(lines(row)).toContain('writing · 1.5 GB of 6.1 GB');
      // And one action: Resume, in place, never Pause
      expect(labels(row).slice(1)).toEqual(['Resume']);
      const resume = button(row.node as unknown as HTMLElement, 'Resume');
      expect(resume.title).toBe(
        'Resume in place: the same kernel, back on a GPU'
      );
      resume.click();
      expect(ran).toEqual([[CommandIDs.resume, 's1']]);
      expect(lines(row).join('\n')).not.toMatch(/paused/i);
    });

    it('says until when a kept kernel waits for a fast resume, with no progress', () => {
      const session = makeSuspended('written', AT_14_05);
      const row = new SessionRow(session, actions, trans);
      row.update(session, NOW);
      const { badge, progress } = parts(row);
      expect(badge.dataset.suspend).toBe('written');
      expect(progress.hidden).toBe(true);
      expect(lines(row)).toContain(
        'Suspended — checkpoint saved; the kernel is kept for a fast resume until 14:05'
      );
      expect(labels(row).slice(1)).toEqual(['Resume']);
    });

    it('warns, without an error, that the checkpoint was not written, and why', () => {
      // Given a kernel whose checkpoint could not be written behind it
      const session = makeSuspended('failed');
      const row = new SessionRow(session, actions, trans);
      row.update(session, NOW);
      const { badge, progress, message } = parts(row);
      // Then the badge and the message take the warning style, not the error's
      expect(badge.dataset.suspend).toBe('failed');
      expect(message.classList.contains('jp-GpuPause-warning')).toBe(true);
      expect(message.classList.contains('jp-GpuPause-error')).toBe(false);
      // And the message says why, and that every variable is still there
      expect(message.textContent).toBe(
        'Suspended — checkpoint not written: the store is full (0 B free of 6.1 GB needed). Every variable is still in the kernel; Resume brings it back in place'
      );
      expect(progress.hidden).toBe(true);
      expect(labels(row).slice(1)).toEqual(['Resume']);
    });

    it('drops the warning once the kernel runs again', () => {
      const row = new SessionRow(makeSuspended('failed'), actions, trans);
      row.update(makeSuspended('failed'), NOW);
      const active = makeSession({ state: 'active', device: 'gpu' });
      row.update(active, NOW);
      const { badge, message } = parts(row);
      expect(badge.dataset).toMatchObject({ state: 'active', suspend: '' });
      expect(message.classList.contains('jp-GpuPause-warning')).toBe(false);
      expect(labels(row).slice(1)).toEqual(['Pause']);
    });
  });
});
