/**
 * A suspended session, as every view words it: its GPU released, its kernel
 * alive with every variable, its checkpoint being written, written (the
 * kernel kept until a time on the user's clock) or not written. Resume is
 * what it offers, in place; never Pause, never "Paused".
 */
import {
  primaryCommand,
  sessionActions,
  suspendPhase,
  SuspendPhase
} from '../actions';
import { clockText, stateLabel, statusText } from '../format';
import {
  secondsText,
  suspendedDetails,
  suspendedLabel,
  suspendedMessage
} from '../suspend/text';
import { CommandIDs, SuspendCheckpoint } from '../tokens';
import { makeSession, makeSuspended } from './sessions';
import { trans } from './translation';

// Local times, so that the clock reads the same in any time zone.
const NOW = new Date(2026, 11, 2, 10, 0).getTime();
const AT_14_05 = new Date(2026, 11, 2, 14, 5).toISOString();
const TOMORROW_08_30 = new Date(2026, 11, 3, 8, 30).toISOString();
const LATER = new Date(2026, 11, 9, 9, 5).toISOString();

describe('a suspended session', () => {
  it.each([
    ['writing', makeSuspended('writing'), 'Suspended · writing checkpoint 25%'],
    [
      'written, kept until 14:05',
      makeSuspended('written', AT_14_05),
      'Suspended · kept until 14:05'
    ],
    [
      'written, kept until tomorrow',
      makeSuspended('written', TOMORROW_08_30),
      'Suspended · kept until 08:30 tomorrow'
    ],
    [
      'written, kept without a limit',
      makeSuspended('written'),
      'Suspended · checkpoint saved'
    ],
    ['failed', makeSuspended('failed'), 'Suspended · checkpoint not written'],
    [
      'in a phase this client does not know',
      makeSuspended('written', null, {
        suspended: {
          ...makeSuspended('written').suspended!,
          // a word of a newer server, off this client's contract
          checkpoint: 'verifying' as SuspendCheckpoint
        }
      }),
      'Suspended'
    ]
  ])('reads in the status bar: %s', (_, session, text) => {
    // Given a suspended session in that phase
    // Then its badge says suspended and its status line where it stands,
    // never "Paused" (its kernel lives)
    expect(stateLabel(session.state, trans)).toBe('suspended');
    expect(statusText(session, trans, NOW)).toBe(text);
  });

  it.each([
    ['writing', makeSuspended('writing'), 'writing'],
    ['written', makeSuspended('written', AT_14_05), 'written'],
    ['failed', makeSuspended('failed'), 'failed'],
    [
      'an error, whatever the record says',
      makeSuspended('writing', null, {
        error: {
          message: 'disk gone',
          reason: 'write-failed',
          state_intact: true
        }
      }),
      'failed'
    ],
    [
      'no record, a write in progress (an older server)',
      makeSuspended('writing', null, { suspended: null }),
      'writing'
    ],
    ['not suspended', makeSession({ state: 'paused' }), null]
  ] as [string, ReturnType<typeof makeSession>, SuspendPhase | null][])(
    'is in the phase of its checkpoint: %s',
    (_, session, phase) => {
      expect(suspendPhase(session)).toBe(phase);
    }
  );

  it.each(['writing', 'written', 'failed'] as const)(
    'offers Resume and only Resume while %s: no Pause, no CPU, no Discard',
    phase => {
      // Given a suspended session whose checkpoint holds GPU tensors
      const session = makeSuspended(phase, AT_14_05, {
        checkpoint: {
          id: 'cp1',
          created: '2026-12-02T09:59:30Z',
          bytes: 6_100_000_000,
          objects: 4,
          skipped: 0,
          gpu_bytes: 4_000_000_000
        }
      });
      // Then one click resumes it, and the panel offers nothing else
      expect(primaryCommand(session)).toBe(CommandIDs.resume);
      expect(sessionActions(session)).toEqual([CommandIDs.resume]);
    }
  );

  it.each([
    ['writing', makeSuspended('writing'), 'Suspended · writing 25% — Resume'],
    [
      'writing, its size not known yet',
      makeSuspended('writing', null, {
        progress: { phase: 'writing', done_bytes: 0, total_bytes: null }
      }),
      'Suspended · writing… — Resume'
    ],
    ['written', makeSuspended('written', AT_14_05), 'Suspended — Resume'],
    ['failed', makeSuspended('failed'), 'Suspended, not saved — Resume']
  ])('labels the toolbar button: %s', (_, session, label) => {
    expect(suspendedLabel(session, trans)).toBe(label);
  });

  it('says how fast the GPU was released and the host memory the kernel holds', () => {
    expect(suspendedDetails(makeSuspended('writing'), trans)).toEqual([
      'GPU released in 0.9 s',
      '12.4 GB in host memory'
    ]);
    // And without the numbers, only what is known
    const unmeasured = makeSuspended('writing', null, {
      suspended: {
        ...makeSuspended('writing').suspended!,
        gpu_released_seconds: null,
        host_bytes: null
      }
    });
    expect(suspendedDetails(unmeasured, trans)).toEqual(['GPU released']);
    expect(secondsText(0.04, trans)).toBe('0.0 s');
    expect(secondsText(42, trans)).toBe('42 s');
  });

  it("writes the kept kernel's end on the user's clock, not the server's", () => {
    // Given a kernel kept until 14:05 local time, whose server wrote 13:05
    const kept = makeSuspended('written', AT_14_05, {
      message:
        'Suspended — checkpoint saved; the kernel is kept for a fast resume until 13:05'
    });
    // Then the sentence gives the time from kept_until, as the user's clock reads it
    expect(suspendedMessage(kept, trans, NOW)).toBe(
      'Suspended — checkpoint saved; the kernel is kept for a fast resume until 14:05'
    );
    // And without a limit it says the kernel is kept, without a time
    expect(suspendedMessage(makeSuspended('written'), trans, NOW)).toBe(
      'Suspended — checkpoint saved; the kernel is kept for a fast resume'
    );
  });

  it.each([
    [AT_14_05, '14:05'],
    [TOMORROW_08_30, '08:30 tomorrow'],
    [LATER, '09:05 on 2026-12-09'],
    [null, ''],
    ['not a time', '']
  ])('writes %p as %p', (iso, text) => {
    expect(clockText(iso, trans, NOW)).toBe(text);
  });

  it('says why a checkpoint was not written, and that every variable is still in the kernel', () => {
    // Given the server's message
    const failed = makeSuspended('failed');
    expect(suspendedMessage(failed, trans, NOW)).toBe(
      'Suspended — checkpoint not written: the store is full (0 B free of 6.1 GB needed). Every variable is still in the kernel; Resume brings it back in place'
    );
    // And without one, the same words made from the server's error
    const bare = makeSuspended('failed', null, { message: null });
    expect(suspendedMessage(bare, trans, NOW)).toBe(
      'Suspended — checkpoint not written: the store is full (0 B free of 6.1 GB needed). Every variable is still in the kernel; Resume brings it back in place'
    );
  });

  it("gives the server's message while writing, or says the GPU is released", () => {
    expect(suspendedMessage(makeSuspended('writing'), trans, NOW)).toBe(
      'Suspended — GPU released in 0.9 s; writing checkpoint'
    );
    const bare = makeSuspended('writing', null, { message: null });
    expect(suspendedMessage(bare, trans, NOW)).toBe(
      'Suspended — GPU released; writing checkpoint'
    );
  });
});
