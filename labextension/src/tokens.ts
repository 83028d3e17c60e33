/**
 * Shared identifiers and the data shapes of the jupyter_gpu_pause REST API.
 *
 * The shapes mirror the server's public contract: fields that do not apply
 * to a session are `null`, times are ISO 8601 UTC strings.
 *
 * A leaf of the module graph: it imports only the shapes of the feature
 * folders (themselves leaves), never the client, the model or a view, so
 * every module may import it without closing a circle.
 */

import type { CommandRegistry } from '@lumino/commands';

import type { components, operations } from './generated/openapi';

export type {
  IAmbientItem,
  ICheckAmbient,
  IRestoreAmbient
} from './ambient/types';
export type {
  IRebuildCell,
  IRebuildFailedDetail,
  IRebuildPlan,
  IRebuiltDetail
} from './rebuild/types';
export type { IAccounting, IGpuHours, IReport } from './report/types';
export type { IBudget, IBudgetDetail, IBudgets } from './budget/types';
export type {
  ICapacity,
  IPauseTier,
  ISuspended,
  SuspendCheckpoint
} from './suspend/types';

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
 * The part of the application a feature registers its commands into: the
 * `JupyterFrontEnd` itself, or anything else holding a command registry.
 */
export interface ICommandsHost {
  /** The application's command registry. */
  readonly commands: CommandRegistry;
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
 * Translation domain of every user-visible string.
 */
export const TRANSLATION_DOMAIN = 'jupyter_gpu_pause';

/**
 * The schemas of the REST API's OpenAPI document
 * (`jupyter_gpu_pause/server/web/api.yaml`, generated into
 * `generated/openapi.ts` by `jlpm gen:api`). The shapes below are derived
 * from them, so a field the document drops or changes fails to compile
 * where the Lab reads it; the document's descriptions say what each field
 * means.
 */
type Schemas = components['schemas'];

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
export type SessionState = Schemas['SessionState'];

/**
 * Options of a resume request (`POST sessions/{id}/resume`): the checkpoint
 * to restore (the latest valid one when omitted), where the kernel may run
 * (the server's default when omitted), and a running kernel to restore
 * into, overwriting its variables.
 */
export type IResumeOptions = NonNullable<
  operations['resumeSession']['requestBody']
>['content']['application/json'];

/**
 * Where a resumed kernel may run.
 */
export type ResumeDevice = NonNullable<IResumeOptions['device']>;

/**
 * Where a resumed kernel was placed: on a GPU, or on the CPU with no GPU
 * visible.
 */
export type KernelDevice = NonNullable<ISession['device']>;

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
export type IWaiting = Schemas['Waiting'];

/**
 * An error as the server reports it: a sentence for the user and a code.
 */
export type IApiError = Schemas['Error'];

/**
 * GPU resources a session's kernel holds.
 */
export type IGpuInfo = Schemas['GpuUsage'];

/**
 * The latest checkpoint of a session, as summarised in a session record.
 * Its `gpu_bytes` above 0 makes a resume on the CPU a real choice (the GPU
 * tensors come back in CPU memory).
 */
export type ICheckpointSummary = Schemas['CheckpointBrief'];

/**
 * An object that could not be saved (or restored), and why.
 */
export type ISkippedObject = Schemas['NameReason'];

/**
 * One checkpoint in full, as listed by `sessions/{id}/checkpoints`.
 */
export type ICheckpoint = Schemas['Checkpoint'];

/** Progress of a running pause, restore or rebuild. */
export type IProgress = Schemas['Progress'];

/**
 * Why a session's last operation failed, and whether the user's state is
 * safe.
 */
export type ISessionError = Schemas['SessionError'];

/**
 * The last restore of a session: what came back and what did not, the
 * rebuild plan for what re-running cells can make again, and the kernel's
 * ambient state.
 */
export type IRestoreReport = Schemas['RestoreReport'];

/**
 * A tracked notebook or console and its kernel, under an id that survives
 * pause and resume (the kernel id does not).
 */
export type ISession = Schemas['Session'];

/**
 * Whether a session's kernel can be paused: `{ok: true}` once known,
 * `{ok: false, reason, message}` once known not (a bash kernel, a Python
 * whose agent cannot run); a session holds `null` while nobody knows yet.
 */
export type IPausable = Schemas['Pausable'];

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
  | 'unpausable'
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
 * Compiles only while {@link EventType} lists exactly the `EventType` enum
 * of the OpenAPI document.
 */
export type EventTypeMatchesSpec = IsTrue<
  [EventType] extends [Schemas['EventType']]
    ? [Schemas['EventType']] extends [EventType]
      ? true
      : false
    : false
>;

/**
 * A lifecycle event, as listed by `GET events`. Its `type` may be one this
 * client does not know yet (a newer server), and its open-ended `detail`
 * is read as below.
 */
export interface IEvent extends Omit<Schemas['Event'], 'type' | 'detail'> {
  /** What happened. */
  type: EventType | string;
  /**
   * Event-specific details; `message` is a sentence for the user. A
   * `waiting` event adds `position` and `reason`; a `resumed` event adds
   * `waited_seconds` and `device` (and `in_place: true` when it brought a
   * suspended kernel back); a `resume_failed` one `error_reason`; a
   * `suspended` one `gpu_released_seconds` and `host_bytes`; `budget_*`
   * ones an `IBudgetDetail`. A `paused` or `cancelled` event an admin asked
   * for on the user's behalf (reason `admin`) names them in `by` (and the
   * JupyterHub service they acted through in `via`) with their
   * `admin_message`.
   */
  detail: {
    message?: string;
    by?: string | null;
    via?: string | null;
    admin_message?: string | null;
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
export type IPolicy = Schemas['Policy'];

/**
 * The dry run of a pause (`POST sessions/{id}/check`): what would be saved
 * and what not, why a pause would fail (a registered name cannot be
 * saved), and what of the kernel's ambient state would not continue after
 * the resume.
 */
export type ICheckReport = Schemas['CheckReport'];

/**
 * Filters of a session listing (`GET sessions`): the sessions of a
 * notebook or console path, or the session of a kernel.
 */
export type ISessionQuery = NonNullable<
  operations['listSessions']['parameters']['query']
>;

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

/**
 * Accepts `true` only: a check that fails to compile when it is not.
 */
type IsTrue<T extends true> = T;
