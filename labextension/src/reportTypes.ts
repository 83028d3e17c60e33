/**
 * The shapes of the GPU-time accounting, as the server sends them: a
 * session's own `accounting` and the `GET report` answer the panel's chart
 * draws. Re-exported by `tokens.ts`.
 */

/**
 * GPU time a session has held, for the accounting.
 */
export interface IAccounting {
  /** Seconds the session's kernel held a GPU. */
  gpu_seconds_held: number;
  /** Of which, seconds it held one while idle. */
  gpu_seconds_idle: number;
}

/**
 * GPU hours in one bucket of the report.
 */
export interface IGpuHours {
  /** Hours a GPU was held. */
  gpu_hours_held: number;
  /** Of which, hours held while idle. */
  gpu_hours_idle: number;
  /** Hours given back by pauses. */
  gpu_hours_reclaimed: number;
}

/**
 * GPU-hours accounting, as answered by `GET report`.
 */
export interface IReport {
  /** Start of the period (ISO 8601 UTC). */
  since: string;
  /** All sessions together. */
  total: IGpuHours;
  /** One entry per day, oldest first. */
  days: (IGpuHours & { day: string })[];
}
