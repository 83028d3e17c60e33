/**
 * The shapes of suspend in place, as the server sends them: a suspended
 * session's `suspended` record, and the pause tier `GET capacity` says is
 * in force. Derived from the REST API's OpenAPI document; re-exported by
 * `tokens.ts`.
 */
import type { components } from '../generated/openapi';

/**
 * Where a suspended kernel's checkpoint stands:
 *
 * - `writing`: being written behind the kernel; see the session's `progress`.
 * - `written`: written; the kernel is kept for a fast resume until
 *   `kept_until`, then shut down (the session turns `paused`).
 * - `failed`: not written; see the session's `error`. Every variable is
 *   still in the kernel.
 */
export type SuspendCheckpoint = NonNullable<ISuspended['checkpoint']>;

/**
 * A suspended session: its GPU released (the driver copied its CUDA state
 * to host memory), its kernel process alive with every variable. Its
 * `checkpoint` says where the checkpoint stands; `kept_until` when the kept
 * kernel will be shut down, its checkpoint written.
 */
export type ISuspended = components['schemas']['Suspension'];

/**
 * Which pause tier a server uses, and why:
 *
 * - `suspend`: suspend in place first (the CUDA driver releases the GPU and
 *   the kernel lives on), the checkpoint written behind it.
 * - `checkpoint`: the checkpoint is written, then the kernel shut down.
 */
export type IPauseTier = components['schemas']['Capacity']['tier'];

/**
 * What the Lab reads of `GET capacity` (docs/capacity.md lists the rest:
 * devices, limits, usage, the queue, the warm kernels).
 */
export type ICapacity = Pick<
  components['schemas']['Capacity'],
  'provider' | 'queue_available' | 'tier'
>;
