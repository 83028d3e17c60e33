/**
 * Shared identifiers and the data shapes of the jupyter_gpu_pause REST API.
 *
 * The shapes mirror the server's public contract: fields that do not apply
 * to a session are `null`, times are ISO 8601 UTC strings.
 */

/**
 * Identifiers of the commands this extension registers.
 */
export namespace CommandIDs {
  /** Pause the current notebook's kernel to durable storage. */
  export const pause = 'jupyter-gpu-pause:pause';
  /** Resume the current notebook's paused kernel with its state. */
  export const resume = 'jupyter-gpu-pause:resume';
  /** Open the panel that lists every tracked session. */
  export const openPanel = 'jupyter-gpu-pause:open-panel';
}

/**
 * Id of the main plugin; also the id of its settings schema.
 */
export const PLUGIN_ID = 'jupyter-gpu-pause:plugin';

/**
 * Translation domain of every user-visible string.
 */
export const TRANSLATION_DOMAIN = 'jupyter_gpu_pause';

/**
 * Lifecycle state of a session.
 *
 * - `active`: kernel running, recently used or busy.
 * - `idle`: kernel running and idle; `pause_at` says when a policy pauses it.
 * - `pausing`: a checkpoint is being written; see `progress`.
 * - `paused`: checkpoint verified, kernel stopped, GPU released.
 * - `waiting`: resume asked, no capacity yet; see `queue_position`.
 * - `restoring`: a new kernel is up and loading the state; see `progress`.
 * - `failed`: the last operation failed; see `error`.
 */
export type SessionState =
  'active' | 'idle' | 'pausing' | 'paused' | 'waiting' | 'restoring' | 'failed';

/**
 * Where a resumed kernel may run.
 */
export type ResumeDevice = 'gpu' | 'cpu' | 'any';

/**
 * An error as the server reports it: a sentence for the user and a code.
 */
export interface IApiError {
  /** A sentence a user understands: what happened and what to do. */
  message: string;
  /** A stable machine-readable code, e.g. `wrong-state`. */
  reason?: string;
}

/**
 * GPU resources a session's kernel holds.
 */
export interface IGpuInfo {
  /** Device UUIDs the kernel uses. */
  devices: string[];
  /** GPU memory held by the kernel, in bytes. */
  memory_bytes: number | null;
  /** Current GPU utilisation, in percent. */
  utilization: number | null;
}

/**
 * The latest checkpoint of a session, as summarised in a session record.
 */
export interface ICheckpointSummary {
  /** Checkpoint id; sorts by creation time. */
  id: string;
  /** Creation time (ISO 8601 UTC). */
  created: string;
  /** Total size of the captured state, in bytes. */
  bytes: number;
  /** Number of objects saved. */
  objects: number;
  /** Number of objects that could not be saved. */
  skipped: number;
}

/**
 * One checkpoint in full, as listed by `sessions/{id}/checkpoints`.
 */
export interface ICheckpoint {
  /** Checkpoint id; sorts by creation time. */
  id: string;
  /** Creation time (ISO 8601 UTC). */
  created: string;
  /** Total size of the captured state, in bytes. */
  bytes: number;
  /** Bytes written for this checkpoint (not shared with earlier ones). */
  new_bytes: number;
  /** Objects saved, with their sizes. */
  objects: { name: string; bytes: number }[];
  /** Objects that could not be saved, with why. */
  skipped: { name: string; reason: string }[];
  /** Whether the signature and every blob hash verify. */
  valid: boolean;
}

/**
 * Progress of a running pause or restore.
 */
export interface IProgress {
  /** Current phase, e.g. `writing` or `loading`. */
  phase: string;
  /** Bytes handled so far. */
  done_bytes: number;
  /** Bytes to handle in total, when known. */
  total_bytes: number | null;
}

/**
 * A tracked notebook or console and its kernel.
 */
export interface ISession {
  /** Stable id; survives pause and resume (the kernel id does not). */
  id: string;
  /** Path of the notebook or console, relative to the server root. */
  path: string;
  /** `notebook` or `console`. */
  type: string;
  /** Current kernel id; `null` while paused. */
  kernel_id: string | null;
  /** Kernelspec name. */
  kernel_name: string;
  /** Lifecycle state. */
  state: SessionState;
  /** Seconds since the last activity. */
  idle_seconds: number | null;
  /** Time of the last activity (ISO 8601 UTC). */
  last_activity: string | null;
  /** When a policy will pause the session (ISO 8601 UTC). */
  pause_at: string | null;
  /** Name of the policy that applies. */
  policy: string | null;
  /** GPU resources held. */
  gpu: IGpuInfo | null;
  /** Latest checkpoint. */
  checkpoint: ICheckpointSummary | null;
  /** Progress of a running pause or restore. */
  progress: IProgress | null;
  /** Position in the capacity queue while `waiting`. */
  queue_position: number | null;
  /** Why the last operation failed. */
  error: IApiError | string | null;
  /** A one-line summary for the user. */
  message: string | null;
}

/**
 * Options of a resume request.
 */
export interface IResumeOptions {
  /** Checkpoint to restore; the latest valid one when omitted. */
  checkpoint_id?: string;
  /** Where the kernel may run; the server's default when omitted. */
  device?: ResumeDevice;
  /** Restore into this running kernel, overwriting its variables. */
  into_kernel?: string;
}

/**
 * Filters of a session listing.
 */
export interface ISessionQuery {
  /** Only sessions of this notebook or console path. */
  path?: string;
  /** Only the session of this kernel. */
  kernel_id?: string;
}

/**
 * The user settings of the extension (schema `schema/plugin.json`).
 */
export interface IGpuPauseSettings {
  /** Seconds between two refreshes of the session state. */
  refreshInterval: number;
  /** Whether the status bar item is shown. */
  showStatusBar: boolean;
  /** Whether a pause asks for confirmation first. */
  confirmBeforePause: boolean;
}

/**
 * Settings in force when the setting registry is unavailable; the same as
 * the schema's defaults.
 */
export const DEFAULT_SETTINGS: Readonly<IGpuPauseSettings> = {
  refreshInterval: 5,
  showStatusBar: true,
  confirmBeforePause: true
};
