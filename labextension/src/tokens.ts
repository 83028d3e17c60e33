/**
 * Shared identifiers and the data shapes of the jupyter_gpu_pause REST API.
 *
 * The shapes mirror the server's public contract: fields that do not apply
 * to a session are `null`, times are ISO 8601 UTC strings.
 */

import { Token } from '@lumino/coreutils';
import type { ISignal } from '@lumino/signaling';

import type { ICheckAmbient, IRestoreAmbient } from './ambientTypes';
import type { GpuPauseAPI } from './api';
import type { SessionsModel } from './model';
import type { IRebuildPlan } from './rebuildTypes';
import type { IAccounting } from './reportTypes';
import type { ISuspended } from './suspendTypes';

export type {
  IAmbientItem,
  ICheckAmbient,
  IRestoreAmbient
} from './ambientTypes';
export type {
  IRebuildCell,
  IRebuildFailedDetail,
  IRebuildPlan,
  IRebuiltDetail
} from './rebuildTypes';
export type { IAccounting, IGpuHours, IReport } from './reportTypes';
export type { IBudget, IBudgetDetail, IBudgets } from './budgetTypes';
export type {
  ICapacity,
  IPauseTier,
  ISuspended,
  SuspendCheckpoint
} from './suspendTypes';

/**
 * Identifiers of the commands this extension registers.
 */
export namespace CommandIDs {
  /** Pause the current notebook's kernel to durable storage. */
  export const pause = 'jupyter-gpu-pause:pause';
  /** Resume the current notebook's paused kernel with its state. */
  export const resume = 'jupyter-gpu-pause:resume';
  /**
   * Resume on the CPU, without a GPU: a paused session at once, a waiting
   * one by leaving the GPU queue. Offered when the checkpoint holds GPU
   * tensors (they come back in CPU memory) and to every waiting session.
   */
  export const resumeCpu = 'jupyter-gpu-pause:resume-cpu';
  /** Open the panel that lists every tracked session. */
  export const openPanel = 'jupyter-gpu-pause:open-panel';
  /** Cancel a running pause or a queued resume. */
  export const cancel = 'jupyter-gpu-pause:cancel';
  /** Postpone a policy's pause of an idle session (keep-alive). */
  export const keepRunning = 'jupyter-gpu-pause:keep-running';
  /** Forget a paused or failed session and delete its checkpoints. */
  export const discard = 'jupyter-gpu-pause:discard';
  /** Refresh the session list now. */
  export const refresh = 'jupyter-gpu-pause:refresh';
  /** Re-run the cells of the last resume's rebuild plan. */
  export const rebuild = 'jupyter-gpu-pause:rebuild';
}

/**
 * Arguments of the session commands. Without any, a command acts on the
 * current notebook's session.
 */
export interface ISessionCommandArgs {
  /** Session id, as the panel knows it. */
  sessionId?: string;
  /** Notebook path, as a notebook toolbar knows it. */
  path?: string;
  /** Rebuild only: re-run even though restored objects would be shared. */
  confirm?: boolean;
}

/**
 * Id of the main plugin; also the id of its settings schema.
 */
export const PLUGIN_ID = 'jupyter-gpu-pause:plugin';

/**
 * Id of the sessions panel in the shell.
 */
export const PANEL_ID = 'jupyter-gpu-pause-panel';

/**
 * What the core plugin shares with the panel and notebook plugins.
 */
export interface IGpuPause {
  /** The REST client. */
  readonly api: GpuPauseAPI;
  /** Every tracked session, polled once for all views. */
  readonly model: SessionsModel;
  /** The user's settings in force. */
  readonly settings: Readonly<IGpuPauseSettings>;
  /** Emitted when the settings change. */
  readonly settingsChanged: ISignal<IGpuPause, void>;
}

/**
 * The token of the core plugin's service.
 */
export const IGpuPause = new Token<IGpuPause>(
  'jupyter-gpu-pause:IGpuPause',
  'The sessions model and REST client of jupyter-gpu-pause.'
);

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
 * - `suspended`: GPU released, the kernel alive with every variable; its
 *   checkpoint is written behind it, or was (the kernel kept for a fast
 *   resume), or failed. See `suspended`; Resume brings it back in place.
 * - `paused`: checkpoint verified, kernel stopped, GPU released.
 * - `waiting`: resume asked, queued for GPU capacity; see `queue_position`
 *   and `waiting`.
 * - `restoring`: a new kernel is up and loading the state; see `progress`.
 * - `failed`: the last operation failed; see `error`.
 */
export type SessionState =
  | 'active'
  | 'idle'
  | 'pausing'
  | 'suspended'
  | 'paused'
  | 'waiting'
  | 'restoring'
  | 'failed';

/**
 * Where a resumed kernel may run.
 */
export type ResumeDevice = 'gpu' | 'cpu' | 'any';

/**
 * Where a resumed kernel was placed: on a GPU, or on the CPU with no GPU
 * visible.
 */
export type KernelDevice = 'gpu' | 'cpu';

/**
 * Why a resume waits, as a stable code (the session's `message` says it in
 * words):
 *
 * - `queue`: other resumes are ahead in the node's FIFO queue.
 * - `quota-sessions`: the admin's limit of GPU sessions on this machine is in use.
 * - `quota-bytes`: the admin's GPU-memory limit on this machine is in use.
 * - `gpu-memory`: no GPU has enough free memory.
 * - `gpu-oom`: the GPU filled up during the restore; back in line once.
 */
export type WaitReason =
  'queue' | 'quota-sessions' | 'quota-bytes' | 'gpu-memory' | 'gpu-oom';

/**
 * What a waiting resume waits for. The queue gives a position, never an
 * ETA: it cannot know when others release their GPUs.
 */
export interface IWaiting {
  /** When the wait began (ISO 8601 UTC); the time waited counts from here. */
  since: string;
  /** Why it still waits; newer servers may send other codes. */
  reason: WaitReason | string;
  /** GPU memory the restore needs, in bytes. */
  needs_bytes: number;
  /** The device asked for: a GPU, or `any` (a GPU when one is free). */
  device: 'gpu' | 'any';
}

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
  /** The same devices' indices, as `nvidia-smi` numbers them. */
  indices?: number[];
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
  /**
   * Bytes of GPU (CUDA) tensors in it; more than 0 makes a resume on the
   * CPU a real choice (they come back in CPU memory).
   */
  gpu_bytes: number;
  /** The objects that could not be saved, with why (when the server says). */
  skipped_objects?: ISkippedObject[];
}

/**
 * An object that could not be saved, and why.
 */
export interface ISkippedObject {
  /** Variable name in the kernel's namespace. */
  name: string;
  /** Why it could not be saved. */
  reason: string;
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

/** Progress of a running pause, restore or rebuild. */
export interface IProgress {
  /** Current phase, e.g. `writing`, `loading` or `rebuilding`. */
  phase: string;
  /** Handled so far: bytes, or cells when `unit` is `cells`. */
  done_bytes: number;
  /** In total, when known. */
  total_bytes: number | null;
  /** What the counts count: bytes when absent, `cells` in a rebuild. */
  unit?: 'bytes' | 'cells' | string;
}

/**
 * Why a session's last operation failed.
 */
export interface ISessionError {
  /** A sentence a user understands: what happened and what to do. */
  message: string;
  /** A stable machine-readable code. */
  reason?: string | null;
  /** Whether the user's state is safe (kernel running, or a checkpoint kept). */
  state_intact?: boolean;
}

/**
 * The last restore of a session: what came back and what did not.
 */
export interface IRestoreReport {
  /** Checkpoint restored from. */
  checkpoint_id?: string;
  /** Names restored. */
  restored?: string[];
  /** Names that could not be restored, with why. */
  failed?: ISkippedObject[];
  /** How re-run cells can make what did not come back; `null`: nothing to. */
  rebuild?: IRebuildPlan | null;
  /**
   * The kernel's ambient state: what came back, what was re-run, what
   * could not; absent or `null` from an older agent or with it turned off.
   */
  ambient?: IRestoreAmbient | null;
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
  /** Current kernel id; `null` while paused (a suspended kernel keeps it). */
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
  /** Progress of a running pause or restore, or of a suspended kernel's checkpoint. */
  progress: IProgress | null;
  /** Position in the node's GPU queue while `waiting`; 1 is next in line. */
  queue_position: number | null;
  /** What a `waiting` session waits for; `null` in every other state. */
  waiting: IWaiting | null;
  /**
   * A `suspended` session's GPU release and checkpoint; `null` in every
   * other state, absent from servers without suspend in place.
   */
  suspended?: ISuspended | null;
  /** Where the last resume placed the running kernel; `null` before any. */
  device: KernelDevice | null;
  /** Whether the session counts as a GPU session (uses or needs a GPU). */
  gpu_session: boolean;
  /**
   * The server (`user@host:port`) that runs this session now, resumed there
   * from the shared store; `null` when it does not run elsewhere.
   */
  running_elsewhere?: string | null;
  /**
   * The kernel a paused notebook has open (JupyterLab started it on opening
   * the notebook) that has run nothing yet: Resume restores into it without
   * asking. `null` otherwise.
   */
  open_kernel?: string | null;
  /** Why the last operation failed. */
  error: ISessionError | string | null;
  /** A one-line summary for the user. */
  message: string | null;
  /** The last restore report, when the session was resumed. */
  restore?: IRestoreReport | null;
  /** GPU time held, when the server accounts for it. */
  accounting?: IAccounting | null;
}

/**
 * Types of lifecycle events: exactly the `enum` of the server's event schema
 * (`EventType` in `server/state/event_types.py`; docs/webhooks.md says what
 * each means). `tests/test_event_vocabulary.py` fails when they differ.
 */
export type EventType =
  | 'warned'
  | 'keepalive'
  | 'paused'
  | 'pause_failed'
  | 'suspended'
  | 'budget_warned'
  | 'budget_held'
  | 'budget_granted'
  | 'resumed'
  | 'resume_failed'
  | 'waiting'
  | 'cancelled'
  | 'culled'
  | 'cull_failed'
  | 'gpu_hold_alarm'
  | 'checkpoint_deleted'
  | 'checkpoints_gone'
  | 'recovered'
  | 'discarded'
  | 'server_stop'
  | 'server_stop_failed'
  | 'rebuilt'
  | 'rebuild_failed';

/**
 * A lifecycle event, as listed by `GET events`.
 */
export interface IEvent {
  /** When it happened (ISO 8601 UTC). */
  time: string;
  /** The session it concerns. */
  session_id: string;
  /** What happened. */
  type: EventType | string;
  /** Who caused it: `user`, `policy:<name>`, `preemption`, `shutdown`. */
  reason: string;
  /**
   * Event-specific details; `message` is a sentence for the user. A
   * `waiting` event adds `position` and `reason`; a `resumed` event adds
   * `waited_seconds` and `device` (and `in_place: true` when it brought a
   * suspended kernel back); a `resume_failed` one `error_reason`; a
   * `suspended` one `gpu_released_seconds` and `host_bytes`; `budget_*`
   * ones an `IBudgetDetail`.
   */
  detail: {
    message?: string;
    pause_at?: string;
    action?: string;
    skipped?: ISkippedObject[] | null;
    [key: string]: unknown;
  };
}

/**
 * A lifecycle event as jupyter_server's event bus carries it: the event,
 * plus where the session stands after it.
 */
export interface ILifecycleEmission extends IEvent {
  /** Path of the session's notebook or console. */
  path: string | null;
  /** The session's state after the event. */
  state: SessionState | string | null;
  /** The session's kernel after the event; `null` while it has none. */
  kernel_id: string | null;
}

/**
 * An admin's idle policy, as in force on the server.
 */
export interface IPolicy {
  /** Policy name. */
  name: string;
  /** Seconds idle before the action. */
  idle_timeout: number;
  /** Seconds of warning before the action. */
  warn_before: number;
  /** `pause`, `cull`, `warn` or `none`. */
  action: string;
  /** Longest keep-alive a user may ask for, in seconds. */
  max_keepalive: number;
}

/**
 * The dry run of a pause: what would be saved and what not.
 */
export interface ICheckReport {
  /** Objects that would be saved. */
  objects: { name: string; bytes: number }[];
  /** Objects that cannot be saved, with why. */
  skipped: ISkippedObject[];
  /** Names registered as required. */
  registered?: string[];
  /** Why a pause would fail (a registered name cannot be saved); `null` when it would not. */
  error?: string | null;
  /**
   * The kernel's ambient state: what would travel and what would not
   * continue after the resume; absent or `null` from an older agent.
   */
  ambient?: ICheckAmbient | null;
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
