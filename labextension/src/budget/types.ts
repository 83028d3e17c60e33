/**
 * The shapes of GPU-hour budgets, as the server sends them: `GET budget`
 * (derived from the REST API's OpenAPI document), the 409 of a GPU resume
 * over budget, and the `detail` of the `budget_*` lifecycle events (which
 * the document leaves open). Re-exported by `tokens.ts`.
 */
import type { components } from '../generated/openapi';

/**
 * One user's GPU-hour budget, as `GET budget` lists it. Where it stands
 * (`state`):
 *
 * - `ok`: below its warning threshold (`warn_at`, a share of the limit).
 * - `warned`: past `warn_at`; GPU resumes still work.
 * - `held`: past `hold_at` (and its grace): GPU resumes are refused until
 *   `retry_at`; resuming on the CPU still works.
 */
export type IBudget = components['schemas']['Budget'];

/**
 * The answer of `GET budget`: for a user, their own budget or none (no
 * budget applies, or they are exempt); for an admin, every user's.
 */
export type IBudgets = components['schemas']['Budgets'];

/**
 * The `detail` of a `budget_warned`, `budget_held` or `budget_granted`
 * event.
 */
export interface IBudgetDetail {
  /** The budget's name. */
  budget: string;
  /** GPU-hours used in the current period. */
  used_hours: number;
  /** GPU-hours allowed in the current period. */
  limit_hours: number;
  /** When the budget renews (ISO 8601 UTC). */
  period_end: string;
  /** The period counted over. */
  period?: IBudget['period'] | string;
  /** When a held GPU resume is allowed again (ISO 8601 UTC). */
  retry_at?: string | null;
  /** A sentence for the user. */
  message?: string;
  /** Other fields of newer servers. */
  [key: string]: unknown;
}
