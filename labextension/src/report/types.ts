/**
 * The shapes of the GPU-time accounting, as the server sends them: a
 * session's own `accounting` and the `GET report` answer the panel's chart
 * draws. Derived from the REST API's OpenAPI document; re-exported by
 * `tokens.ts`.
 */
import type { components } from '../generated/openapi';

/**
 * GPU time a session has held (and of which idle, and given back by
 * pauses), for the accounting.
 */
export type IAccounting = components['schemas']['SessionAccounting'];

/**
 * GPU hours in one bucket of the report: held, of which idle, and given
 * back by pauses.
 */
export type IGpuHours = components['schemas']['GpuHours'];

/**
 * GPU-hours accounting, as answered by `GET report`: all sessions together,
 * each session, and one entry per day, oldest first.
 */
export type IReport = components['schemas']['Report'];
