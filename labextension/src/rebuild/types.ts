/**
 * The shapes of a rebuild, as the server sends them (docs/rebuild.md): the
 * plan in a restore report and a `resumed` event (derived from the REST
 * API's OpenAPI document), and the details of the `rebuilt` and
 * `rebuild_failed` events (which the document leaves open). Re-exported by
 * `tokens.ts`.
 */
import type { components } from '../generated/openapi';

/**
 * A rebuild plan: which names re-running which recorded cells makes again,
 * without touching what the checkpoint restored; the names that cannot be
 * rebuilt, with why; the server's one-line summary ("`h`: re-run cell [2]
 * — 0.0 s"), and why nothing can be rebuilt at all (e.g. no cell log).
 */
export type IRebuildPlan = components['schemas']['RebuildPlan'];

/**
 * One recorded cell a rebuild re-runs: its execution count (`[3]`), its
 * recorded run time in seconds, its first non-blank line.
 */
export type IRebuildCell = IRebuildPlan['cells'][number];

/**
 * The detail of a `rebuilt` event: what came back, by re-running what.
 */
export interface IRebuiltDetail {
  /** Names made again. */
  names?: string[];
  /** The cells re-run (without their code). */
  cells?: Pick<IRebuildCell, 'execution_count' | 'seconds'>[];
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
