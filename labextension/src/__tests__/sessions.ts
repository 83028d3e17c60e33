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
    error: null,
    message: null,
    ...overrides
  };
}
