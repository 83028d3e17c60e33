/**
 * A Session as the server sends it, with every field that does not apply
 * `null`; tests override what they are about.
 */
import { ISession } from '../tokens';

/**
 * A running notebook session; `overrides` set the fields under test.
 */
export function makeSession(overrides: Partial<ISession> = {}): ISession {
  return {
    id: 's1',
    path: 'exp/train.ipynb',
    type: 'notebook',
    kernel_id: 'k1',
    kernel_name: 'python3',
    state: 'active',
    idle_seconds: null,
    last_activity: null,
    pause_at: null,
    policy: null,
    gpu: null,
    checkpoint: null,
    progress: null,
    queue_position: null,
    waiting: null,
    suspended: null,
    device: null,
    gpu_session: false,
    running_elsewhere: null,
    open_kernel: null,
    error: null,
    message: null,
    restore: null,
    last_operation: null,
    pausable: null,
    accounting: {
      gpu_seconds_held: 0,
      gpu_seconds_idle: 0,
      gpu_seconds_reclaimed: 0,
      gpu_seconds_unpausable: 0
    },
    ...overrides
  };
}

/**
 * A checkpoint summary of `bytes`, of which `gpuBytes` are GPU tensors.
 */
export function makeCheckpoint(
  bytes: number,
  gpuBytes: number
): NonNullable<ISession['checkpoint']> {
  return {
    id: 'cp1',
    created: '2026-12-02T09:00:00Z',
    bytes,
    objects: 4,
    skipped: 0,
    gpu_bytes: gpuBytes
  };
}

/**
 * A resume waiting for a GPU since `since`, second in line because the
 * machine's limit of GPU sessions is in use; `overrides` as above.
 */
export function makeWaiting(
  since: string,
  overrides: Partial<ISession> = {}
): ISession {
  return makeSession({
    state: 'waiting',
    kernel_id: null,
    gpu_session: true,
    checkpoint: makeCheckpoint(6_100_000_000, 4_000_000_000),
    queue_position: 2,
    waiting: {
      since,
      reason: 'quota-sessions',
      needs_bytes: 14 * 1024 ** 3,
      device: 'gpu'
    },
    message:
      'Waiting for a GPU (#2 in line): the limit of 1 GPU session on this machine is in use',
    ...overrides
  });
}

/**
 * A kernel suspended at 09:59 UTC, its GPU released in 0.9 s and 12.4 GB
 * held in host memory, its checkpoint in `checkpoint`: while `writing`, a
 * quarter written; once `written`, kept until `keptUntil`; after `failed`,
 * with the server's error. `overrides` as above.
 */
export function makeSuspended(
  checkpoint: 'writing' | 'written' | 'failed',
  keptUntil: string | null = null,
  overrides: Partial<ISession> = {}
): ISession {
  const messages = {
    writing: 'Suspended — GPU released in 0.9 s; writing checkpoint',
    written:
      'Suspended — checkpoint saved; the kernel is kept for a fast resume until 14:05',
    failed:
      'Suspended — checkpoint not written: the store is full (0 B free of 6.1 GB needed). Every variable is still in the kernel; Resume brings it back in place'
  };
  return makeSession({
    state: 'suspended',
    gpu_session: true,
    device: 'gpu',
    suspended: {
      since: '2026-12-02T09:59:00Z',
      host_bytes: 12_400_000_000,
      checkpoint,
      kept_until: keptUntil,
      gpu_released_seconds: 0.9
    },
    progress:
      checkpoint === 'writing'
        ? {
            phase: 'writing',
            done_bytes: 1_525_000_000,
            total_bytes: 6_100_000_000
          }
        : null,
    error:
      checkpoint === 'failed'
        ? {
            reason: 'store-full',
            message:
              'checkpoint not written: the store is full (0 B free of 6.1 GB needed)',
            state_intact: true
          }
        : null,
    message: messages[checkpoint],
    ...overrides
  });
}
