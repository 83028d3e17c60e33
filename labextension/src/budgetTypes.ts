/**
 * The shapes of GPU-hour budgets, as the server sends them: `GET budget`,
 * the 409 of a GPU resume over budget, and the `detail` of the `budget_*`
 * lifecycle events. Re-exported by `tokens.ts`.
 */

/**
 * The period a budget counts over: the calendar month, the calendar week,
 * or the last 30 days (rolling: hours leave it 30 days after they were
 * used). Newer servers may send other names.
 */
export type BudgetPeriod =
  'month' | 'week' | 'day' | 'rolling_7d' | 'rolling_30d';

/**
 * Where a budget stands:
 *
 * - `ok`: below its warning threshold.
 * - `warned`: past `warn_at`; GPU resumes still work.
 * - `held`: past `hold_at` (and its grace): GPU resumes are refused until
 *   `retry_at`; resuming on the CPU still works.
 */
export type BudgetState = 'ok' | 'warned' | 'held';

/**
 * Which rule set a budget: the user's own, their group's, or the default.
 */
export type BudgetScope = 'user' | 'group' | 'default';

/**
 * One user's GPU-hour budget, as `GET budget` lists it.
 */
export interface IBudget {
  /** The budget's name, as the admin configured it. */
  name: string;
  /** The user it applies to. */
  user: string;
  /** Which rule set it. */
  scope: BudgetScope | string;
  /** GPU-hours used in the current period. */
  used_hours: number;
  /** GPU-hours allowed in the current period. */
  limit_hours: number;
  /** GPU-hours an admin granted on top in the current period. */
  granted_hours: number;
  /** The period counted over. */
  period: BudgetPeriod | string;
  /** Start of the current period (ISO 8601 UTC). */
  period_start: string;
  /** End of the current period: when the budget renews (ISO 8601 UTC). */
  period_end: string;
  /** Share of the limit past which the user is warned. */
  warn_at: number;
  /** Share of the limit past which GPU resumes are held. */
  hold_at: number;
  /** What the server lets run past `hold_at` before holding. */
  grace: number;
  /** `used_hours / limit_hours`. */
  ratio: number;
  /** Where it stands; newer servers may send other words. */
  state: BudgetState | string;
  /** When a held GPU resume is allowed again (ISO 8601 UTC); `null` when not held. */
  retry_at: string | null;
}

/**
 * The answer of `GET budget`.
 */
export interface IBudgets {
  /** Whether the user is an admin: then every user's budget is listed. */
  admin: boolean;
  /** Whose server answered: the user whose own budget the panel shows. */
  user?: string;
  /** Whether any budget is configured on the server. */
  configured?: boolean;
  /**
   * The budgets: for a user, their own or none (no budget applies, or they
   * are exempt); for an admin, every user's.
   */
  budgets: IBudget[];
}

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
  period?: BudgetPeriod | string;
  /** When a held GPU resume is allowed again (ISO 8601 UTC). */
  retry_at?: string | null;
  /** A sentence for the user. */
  message?: string;
  /** Other fields of newer servers. */
  [key: string]: unknown;
}
