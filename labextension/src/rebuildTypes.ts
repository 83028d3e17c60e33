/**
 * The shapes of a rebuild, as the server sends them (docs/rebuild.md): the
 * plan in a restore report and a `resumed` event, and the details of the
 * `rebuilt` and `rebuild_failed` events. Re-exported by `tokens.ts`.
 */

/**
 * One recorded cell a rebuild re-runs.
 */
export interface IRebuildCell {
  /** The cell's execution count (`[3]`); `null` when it had none. */
  execution_count: number | null;
  /** Its recorded run time in seconds; `null` when unknown. */
  seconds: number | null;
  /** Its first non-blank line (at most 200 characters). */
  code?: string;
}

/**
 * A rebuild plan: which names re-running which recorded cells makes again,
 * without touching what the checkpoint restored.
 */
export interface IRebuildPlan {
  /** Names the plan makes again; empty when none can be rebuilt. */
  names: string[];
  /** The cells it re-runs, in order. */
  cells: IRebuildCell[];
  /** Their recorded run time together; `null` when one is unknown. */
  seconds: number | null;
  /** Names that cannot be rebuilt, with why. */
  unbuildable: { name: string; reason: string }[];
  /** The server's one-line summary ("`h`: re-run cell [2] — 0.0 s"). */
  text?: string | null;
  /** Why nothing can be rebuilt at all (e.g. no cell log), when so. */
  problem?: string | null;
}

/**
 * The detail of a `rebuilt` event: what came back, by re-running what.
 */
export interface IRebuiltDetail {
  /** Names made again. */
  names?: string[];
  /** The cells re-run (without their code). */
  cells?: IRebuildCell[];
  /** How long the re-run took, in seconds. */
  seconds?: number | null;
  /** Bytes of restored values copied so the re-run could not change them. */
  copy_bytes?: number;
  /** The server's sentence. */
  message?: string;
}

/**
 * The detail of a `rebuild_failed` event. `error_reason` says which:
 * `cell-failed` (a re-run cell raised; nothing was written back, see
 * `failed`), `needs-confirm` (nothing ran: the cells would share the
 * restored objects in `shared`), or another error code.
 */
export interface IRebuildFailedDetail {
  /** Why it failed, as a stable code. */
  error_reason?: string;
  /** The cell that raised, with its first line and the error. */
  failed?: { execution_count: number | null; code?: string; error?: string };
  /** Restored objects the re-run would share, with why. */
  shared?: { name: string; reason: string }[];
  /** The plan that ran, or would have. */
  plan?: IRebuildPlan;
  /** The server's sentence. */
  message?: string;
}
