/**
 * A GPU-hour budget as `GET budget` lists it; tests override what they are
 * about. Times are local, so that the clock reads the same in any time zone.
 */
import { IBudget } from '../tokens';

/** The tests' now: 2 December 2026, 10:00 local time. */
export const NOW = new Date(2026, 11, 2, 10, 0).getTime();

/** When the month's budget renews: 1 January 2027, 00:00 local time. */
export const RENEWS = new Date(2027, 0, 1, 0, 0).toISOString();

/**
 * Alice's own budget "alice", 12.4 of 40 GPU-hours used this month.
 */
export function makeBudget(overrides: Partial<IBudget> = {}): IBudget {
  return {
    name: 'alice',
    user: 'alice',
    scope: 'user',
    used_hours: 12.4,
    limit_hours: 40,
    granted_hours: 0,
    period: 'month',
    period_start: new Date(2026, 11, 1, 0, 0).toISOString(),
    period_end: RENEWS,
    warn_at: 0.8,
    hold_at: 1,
    grace: 0,
    ratio: 0.31,
    state: 'ok',
    retry_at: null,
    text: '',
    unpausable_hours: 0,
    ...overrides
  };
}

/** The same budget past its warning threshold: 32.1 of 40 (80%). */
export function makeWarned(overrides: Partial<IBudget> = {}): IBudget {
  return makeBudget({
    used_hours: 32.1,
    ratio: 32.1 / 40,
    state: 'warned',
    ...overrides
  });
}

/** The same budget used up: GPU resumes held until it renews. */
export function makeHeld(overrides: Partial<IBudget> = {}): IBudget {
  return makeBudget({
    used_hours: 40.2,
    ratio: 40.2 / 40,
    state: 'held',
    retry_at: RENEWS,
    ...overrides
  });
}
