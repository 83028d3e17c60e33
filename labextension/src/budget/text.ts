/**
 * The texts of GPU-hour budgets, shared by the panel's budget line, the
 * `budget_*` notifications and the toast of a resume the budget refused.
 * A held budget holds only GPU resumes: every text that says so also says
 * that a resume on the CPU still works, and when the GPU is back. Times are
 * composed from the server's ISO fields, so they are on the user's clock.
 * Pure functions: no DOM, no server.
 */
import { clockText, sentence, Trans } from '../format';
import { IBudget, IBudgetDetail, IEvent } from '../tokens';

/**
 * GPU-hours with one decimal at most, the decimal dropped when it is zero
 * or the number is large: "12.4", "40", "0.5", "128"; below one hour two
 * significant digits, so a small budget never reads "0 of 0": "0.0031".
 */
export function hoursText(hours: number): string {
  const value = Number.isFinite(hours) ? Math.max(0, hours) : 0;
  if (value >= 100) {
    return String(Math.round(value));
  }
  if (value > 0 && value < 1) {
    return String(Number(value.toPrecision(2)));
  }
  return String(Math.round(value * 10) / 10);
}

/**
 * The share of its limit a budget has used, in whole percent, rounded down
 * so that it says 100% only once the limit is reached.
 */
export function budgetPercent(budget: IBudget): number {
  const ratio = Number.isFinite(budget.ratio)
    ? budget.ratio
    : budget.limit_hours > 0
      ? budget.used_hours / budget.limit_hours
      : 0;
  return Math.max(0, Math.floor(ratio * 100 + 1e-9));
}

/**
 * Hours used of the limit over the budget's period: "12.4 of 40 GPU-hours
 * this month", "… this week", "… in the last 30 days".
 */
export function usageText(
  used: number,
  limit: number,
  period: string,
  trans: Trans
): string {
  const u = hoursText(used);
  const l = hoursText(limit);
  switch (period) {
    case 'month':
      return trans.__('%1 of %2 GPU-hours this month', u, l);
    case 'week':
      return trans.__('%1 of %2 GPU-hours this week', u, l);
    case 'day':
      return trans.__('%1 of %2 GPU-hours today', u, l);
    case 'rolling_7d':
      return trans.__('%1 of %2 GPU-hours in the last 7 days', u, l);
    case 'rolling_30d':
      return trans.__('%1 of %2 GPU-hours in the last 30 days', u, l);
    default:
      return trans.__('%1 of %2 GPU-hours this period', u, l);
  }
}

/**
 * The panel's budget line: the usage, and past the warning threshold the
 * share used, so the state never rests on colour: "32.1 of 40 GPU-hours
 * this month — 80% used".
 */
export function budgetText(budget: IBudget, trans: Trans): string {
  const usage = usageText(
    budget.used_hours,
    budget.limit_hours,
    budget.period,
    trans
  );
  if (budget.state === 'warned' || budget.state === 'held') {
    return trans.__('%1 — %2% used', usage, budgetPercent(budget));
  }
  return usage;
}

/**
 * When a held budget lets GPU resumes again: its `retry_at`, else the end
 * of its period; `null` when the server gave neither.
 */
export function renewalTime(
  budget: Pick<IBudget, 'retry_at' | 'period_end'> | IBudgetDetail
): string | null {
  return budget.retry_at || budget.period_end || null;
}

/**
 * What a held budget means, for the line under the usage: "GPU resumes
 * held until 00:00 on 2027-01-01; CPU resume still works". '' when the
 * budget is not held.
 */
export function budgetHeldText(
  budget: IBudget,
  trans: Trans,
  now: number
): string {
  if (budget.state !== 'held') {
    return '';
  }
  const until = clockText(renewalTime(budget), trans, now);
  return until
    ? trans.__('GPU resumes held until %1; CPU resume still works', until)
    : trans.__('GPU resumes held; CPU resume still works');
}

/**
 * The budget line's tooltip: whose budget it is, when it renews, and the
 * hours an admin granted on top.
 */
export function budgetHint(budget: IBudget, trans: Trans, now: number): string {
  const lines = [
    budget.scope === 'user'
      ? trans.__('Your GPU-hour budget "%1".', budget.name)
      : budget.scope === 'group'
        ? trans.__('Your group\'s GPU-hour budget "%1".', budget.name)
        : trans.__('The default GPU-hour budget "%1".', budget.name)
  ];
  const renews = clockText(budget.period_end, trans, now);
  if (renews) {
    lines.push(trans.__('It renews at %1.', renews));
  }
  if (budget.granted_hours > 0) {
    lines.push(
      trans.__(
        'An admin granted %1 GPU-hours more this period.',
        hoursText(budget.granted_hours)
      )
    );
  }
  return lines.join('\n');
}

/**
 * That GPU resumes are held, until when, and that the CPU still works: the
 * tail of the held toast and of a refused resume's.
 */
export function heldUntilText(
  retryAt: string | null | undefined,
  trans: Trans,
  now: number
): string {
  const until = clockText(retryAt, trans, now);
  return until
    ? trans.__(
        'GPU resumes are held until %1; resuming on the CPU still works.',
        until
      )
    : trans.__('GPU resumes are held; resuming on the CPU still works.');
}

/**
 * The toast of a `budget_*` event: the server's message (or the same
 * words made here), and for a hold, until when GPU resumes are held.
 */
export function budgetEventText(
  event: IEvent,
  trans: Trans,
  now: number
): string {
  const detail = event.detail as Partial<IBudgetDetail>;
  const message = sentence(detail.message ?? '');
  const usage = usageText(
    Number(detail.used_hours),
    Number(detail.limit_hours),
    String(detail.period ?? ''),
    trans
  );
  const name = detail.budget ?? '';
  switch (event.type) {
    case 'budget_warned':
      return (
        message ||
        trans.__('GPU-hour budget "%1" is nearly used: %2.', name, usage)
      );
    case 'budget_held':
      // made here from the fields, not the server's sentence: the renewal on
      // the user's clock, said once
      return [
        trans.__('GPU-hour budget "%1" is used up: %2.', name, usage),
        heldUntilText(renewalTime(detail as IBudgetDetail), trans, now)
      ].join(' ');
    default:
      return (
        message ||
        trans.__('An admin granted GPU-hours to budget "%1": %2.', name, usage)
      );
  }
}

/**
 * The toast of a resume the budget refused (409 `budget-exceeded`): the
 * server's message, then until when GPU resumes are held.
 */
export function budgetRefusedText(
  message: string,
  retryAt: string | null | undefined,
  trans: Trans,
  now: number,
  budget?: string
): string {
  // With the budget's name, the words are made here (the renewal on the
  // user's clock, said once); else the server's sentence leads
  const lead = budget
    ? trans.__('GPU-hour budget "%1" is used up.', budget)
    : sentence(message);
  return [lead, heldUntilText(retryAt, trans, now)].filter(Boolean).join(' ');
}
