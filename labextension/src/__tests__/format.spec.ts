/**
 * The short texts every view shows: sizes, durations, countdowns and the
 * status bar line of each state.
 */
import {
  bytesText,
  countdownText,
  durationText,
  errorText,
  gibibytes,
  progressRatio,
  progressText,
  queueText,
  rebuildingText,
  statusText,
  untranslated
} from '../format';
import { makeSession, makeWaiting } from './sessions';

const NOW = Date.parse('2026-12-02T10:00:00Z');

describe('format', () => {
  it('writes sizes in decimal units like the server, GPU memory in GiB', () => {
    expect(bytesText(6_100_000_000)).toBe('6.1 GB');
    expect(bytesText(512)).toBe('512 B');
    expect(bytesText(123_456_789)).toBe('123 MB');
    expect(bytesText(null)).toBe('');
    expect(gibibytes(15_032_385_536)).toBe('14.0 GiB');
    expect(gibibytes(300 * 1024 ** 2)).toBe('300 MiB');
  });

  it.each([
    [45, '45 s'],
    [720, '12 min'],
    [3.5 * 3600, '3.5 h'],
    [5 * 86400, '5 d']
  ])('writes %p seconds as %p', (seconds, text) => {
    expect(durationText(seconds, untranslated)).toBe(text);
  });

  it('writes countdowns as a clock and stops at zero', () => {
    expect(countdownText(245)).toBe('4:05');
    expect(countdownText(3723)).toBe('1:02:03');
    expect(countdownText(-10)).toBe('0:00');
  });

  it.each([
    [
      'an idle kernel holding a GPU',
      makeSession({
        state: 'idle',
        idle_seconds: 720,
        gpu: {
          devices: ['GPU-1'],
          memory_bytes: 14.2 * 1024 ** 3,
          utilization: 0,
          indices: [0]
        }
      }),
      'GPU 0 · 14.2 GiB · idle 12 min'
    ],
    [
      'an idle kernel a policy will pause',
      makeSession({
        state: 'idle',
        idle_seconds: 60,
        pause_at: '2026-12-02T10:04:05Z'
      }),
      'No GPU · idle 60 s · pauses in 4:05'
    ],
    [
      'a kernel a resume placed on the CPU',
      makeSession({ state: 'active', device: 'cpu' }),
      'On CPU · active'
    ],
    [
      'a kernel a resume placed on a GPU, its memory not measured',
      makeSession({ state: 'active', device: 'gpu' }),
      'On GPU · active'
    ],
    [
      'a paused session',
      makeSession({
        state: 'paused',
        kernel_id: null,
        checkpoint: {
          id: 'c',
          created: '',
          bytes: 6_100_000_000,
          objects: 4,
          skipped: 0,
          gpu_bytes: 0
        }
      }),
      'Paused · 6.1 GB'
    ],
    [
      'a queued resume',
      makeSession({ state: 'waiting', queue_position: 2 }),
      'Waiting for GPU · #2'
    ],
    [
      'a queued resume without a position',
      makeSession({ state: 'waiting' }),
      'Waiting for GPU'
    ],
    [
      'a pause in progress',
      makeSession({
        state: 'pausing',
        progress: { phase: 'writing', done_bytes: 42, total_bytes: 100 }
      }),
      'Pausing 42%'
    ],
    [
      'a kernel re-running cells to rebuild variables',
      makeSession({
        state: 'active',
        device: 'gpu',
        progress: {
          phase: 'rebuilding',
          done_bytes: 1,
          total_bytes: 3,
          unit: 'cells'
        }
      }),
      'On GPU · Rebuilding: cell 2 of 3'
    ]
  ])('says %s in the status bar', (_, s, text) => {
    expect(statusText(s, untranslated, NOW)).toBe(text);
  });

  it('says where a waiting resume stands and how long it waited, never when it ends', () => {
    // Given a resume waiting since 09:57:30, second in line
    const s = makeWaiting('2026-12-02T09:57:30Z');
    // Then at 10:00 it has waited 2.5 minutes, rounded as durations are
    expect(queueText(s, untranslated, NOW)).toBe('#2 in line · waiting 3 min');
    // And 45 s in, it says seconds
    expect(queueText(s, untranslated, Date.parse('2026-12-02T09:58:15Z'))).toBe(
      '#2 in line · waiting 45 s'
    );
    // And what it knows without a position or a start
    expect(queueText({ ...s, queue_position: null }, untranslated, NOW)).toBe(
      'waiting 3 min'
    );
    expect(queueText({ ...s, waiting: null }, untranslated, NOW)).toBe(
      '#2 in line'
    );
  });

  it('shows progress in bytes', () => {
    const s = makeSession({
      state: 'restoring',
      progress: { phase: 'loading', done_bytes: 1.2e9, total_bytes: 6.1e9 }
    });
    expect(progressText(s, untranslated)).toBe('1.2 GB of 6.1 GB');
  });

  it.each([
    [0, 'cell 1 of 3'],
    [1, 'cell 2 of 3'],
    [2, 'cell 3 of 3'],
    [3, 'cell 3 of 3']
  ])(
    'counts a rebuild in cells, never in bytes: %p done reads %p',
    (done, text) => {
      // Given a rebuild that has re-run `done` of its 3 cells
      const s = makeSession({
        state: 'active',
        progress: {
          phase: 'rebuilding',
          done_bytes: done,
          total_bytes: 3,
          unit: 'cells'
        }
      });
      // Then every view reads the cell running, and no size
      expect(progressText(s, untranslated)).toBe(text);
      expect(rebuildingText(s, untranslated)).toBe(`Rebuilding: ${text}`);
      expect(statusText(s, untranslated, NOW)).not.toMatch(/\bB\b|kB|MB/);
      expect(progressRatio(s)).toBeCloseTo(done / 3);
    }
  );

  it('reads a rebuild before its count is known, and only a rebuild as one', () => {
    const starting = makeSession({
      progress: {
        phase: 'rebuilding',
        done_bytes: 0,
        total_bytes: 0,
        unit: 'cells'
      }
    });
    expect(progressText(starting, untranslated)).toBe('');
    expect(rebuildingText(starting, untranslated)).toBe('Rebuilding…');
    expect(rebuildingText(makeSession(), untranslated)).toBe('');
  });

  it('says what is safe after a failure', () => {
    expect(
      errorText(
        {
          message: 'the store is full',
          reason: 'store-full',
          state_intact: true
        },
        untranslated
      )
    ).toBe('The store is full. Your state is intact.');
    expect(
      errorText(
        {
          message: 'The kernel died.',
          reason: 'kernel-died',
          state_intact: false
        },
        untranslated
      )
    ).toBe('The kernel died. Some of your state may be lost.');
    // The server's sentence already says it: not twice.
    expect(
      errorText(
        {
          message: 'Pause failed. The kernel is still running.',
          reason: 'pause-failed',
          state_intact: true
        },
        untranslated
      )
    ).toBe('Pause failed. The kernel is still running.');
  });
});
