/**
 * The shapes of suspend in place, as the server sends them: a suspended
 * session's `suspended` record, and the pause tier `GET capacity` says is
 * in force. Re-exported by `tokens.ts`.
 */

/**
 * Where a suspended kernel's checkpoint stands:
 *
 * - `writing`: being written behind the kernel; see the session's `progress`.
 * - `written`: written; the kernel is kept for a fast resume until
 *   `kept_until`, then shut down (the session turns `paused`).
 * - `failed`: not written; see the session's `error`. Every variable is
 *   still in the kernel.
 */
export type SuspendCheckpoint = 'writing' | 'written' | 'failed';

/**
 * A suspended session: its GPU released (the driver copied its CUDA state
 * to host memory), its kernel process alive with every variable.
 */
export interface ISuspended {
  /** When the GPU was released (ISO 8601 UTC). */
  since: string;
  /** Host memory the suspended kernel holds, in bytes; `null` when unknown. */
  host_bytes: number | null;
  /** Where its checkpoint stands; newer servers may send other words. */
  checkpoint: SuspendCheckpoint | string;
  /**
   * When the kept kernel will be shut down, its checkpoint written (ISO
   * 8601 UTC); `null` while writing, after a failed write, or when kept
   * without a limit.
   */
  kept_until: string | null;
  /** Seconds the release of the GPU took; `null` when not measured. */
  gpu_released_seconds: number | null;
}

/**
 * Which pause tier a server uses, and why:
 *
 * - `suspend`: suspend in place first (the CUDA driver releases the GPU and
 *   the kernel lives on), the checkpoint written behind it.
 * - `checkpoint`: the checkpoint is written, then the kernel shut down.
 */
export interface IPauseTier {
  /** The tier in force; newer servers may send other names. */
  name: 'suspend' | 'checkpoint' | string;
  /**
   * Why, as a phrase for the user: "the CUDA driver 570.86 has the
   * checkpoint API", "no CUDA driver on this machine (libcuda.so.1 not
   * found)".
   */
  reason: string;
  /** The CUDA driver's version; `null` when there is none. */
  driver_version: string | null;
}

/**
 * What the Lab reads of `GET capacity` (docs/capacity.md lists the rest:
 * devices, limits, usage, the queue, the warm kernels).
 */
export interface ICapacity {
  /** The capacity provider in use, e.g. `quota` or `nvml`. */
  provider: string;
  /** Whether the machine's resume queue can be reached. */
  queue_available?: boolean;
  /** The pause tier in force; absent from servers without suspend in place. */
  tier?: IPauseTier | null;
  /** Other fields of the answer. */
  [key: string]: unknown;
}
