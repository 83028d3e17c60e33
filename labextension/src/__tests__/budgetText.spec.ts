/**
 * A GPU-hour budget in words: the hours used of the limit over its period,
 * the share used once warned, and once held, until when GPU resumes are
 * held and that a CPU resume still works; the toasts of the `budget_*`
 * events and of a resume the budget refused.
 */
import {
  budgetEventText,
  budgetHeldText,
  budgetHint,
  budgetPercent,
  budgetRefusedText,
  budgetText,
  hoursText
} from '../budget/text';
import { EventType, IBudget, IEvent } from '../tokens';
import { makeBudget, makeHeld, makeWarned, NOW, RENEWS } from './budgets';
import { trans } from './translation';

function event(type: EventType, detail: IEvent['detail'] = {}): IEvent {
  return {
    time: new Date(NOW).toISOString(),
    session_id: 's1',
    type,
    reason: 'budget',
    detail
  };
}

describe('the budget line', () => {
  it.each([
    ['month', '12.4 of 40 GPU-hours this month'],
    ['week', '12.4 of 40 GPU-hours this week'],
    ['rolling_30d', '12.4 of 40 GPU-hours in the last 30 days'],
    ['fortnight', '12.4 of 40 GPU-hours this period']
  ])('says the hours used of the limit over a %s', (period, text) => {
    // 'fortnight': a period of a newer server, off this client's contract
    const budget = makeBudget({ period: period as IBudget['period'] });
    expect(budgetText(budget, trans)).toBe(text);
  });

  it.each([
    [12.44, '12.4'],
    [12.46, '12.5'],
    [40, '40'],
    [39.96, '40'],
    [0.04, '0.04'],
    [0.003062, '0.0031'],
    [0, '0'],
    [0.5, '0.5'],
    [128.6, '129'],
    [-1, '0'],
    [NaN, '0']
  ])('writes %p GPU-hours as %p', (hours, text) => {
    expect(hoursText(hours)).toBe(text);
  });

  it('says the share used past the warning threshold, rounded down', () => {
    expect(budgetText(makeWarned(), trans)).toBe(
      '32.1 of 40 GPU-hours this month — 80% used'
    );
    // 99.9% is not yet 100%
    expect(budgetPercent(makeWarned({ ratio: 0.999 }))).toBe(99);
    // A ratio the server left out is the hours' own
    expect(budgetPercent(makeWarned({ ratio: NaN }))).toBe(80);
    // Below the threshold the line is the usage alone, and nothing is held
    expect(budgetHeldText(makeBudget(), trans, NOW)).toBe('');
    expect(budgetHeldText(makeWarned(), trans, NOW)).toBe('');
  });

  it('says until when a held budget holds GPU resumes, and that the CPU still works', () => {
    const held = makeHeld();
    expect(budgetText(held, trans)).toBe(
      '40.2 of 40 GPU-hours this month — 100% used'
    );
    expect(budgetHeldText(held, trans, NOW)).toBe(
      'GPU resumes held until 00:00 on 2027-01-01; CPU resume still works'
    );
    // Without retry_at, the end of the period; without either, no time
    const tomorrow = new Date(2026, 11, 3, 9, 30).toISOString();
    expect(
      budgetHeldText(
        makeHeld({ retry_at: null, period_end: tomorrow }),
        trans,
        NOW
      )
    ).toBe('GPU resumes held until 09:30 tomorrow; CPU resume still works');
    expect(
      budgetHeldText(makeHeld({ retry_at: null, period_end: '' }), trans, NOW)
    ).toBe('GPU resumes held; CPU resume still works');
  });

  it.each([
    ['user', 'Your GPU-hour budget "alice".'],
    ['group', 'Your group\'s GPU-hour budget "alice".'],
    ['default', 'The default GPU-hour budget "alice".']
  ])('names a %s budget in its tooltip, with its renewal', (scope, first) => {
    expect(budgetHint(makeBudget({ scope }), trans, NOW).split('\n')).toEqual([
      first,
      'It renews at 00:00 on 2027-01-01.'
    ]);
  });

  it('says in the tooltip the hours an admin granted', () => {
    expect(budgetHint(makeBudget({ granted_hours: 10 }), trans, NOW)).toBe(
      'Your GPU-hour budget "alice".\nIt renews at 00:00 on 2027-01-01.\nAn admin granted 10 GPU-hours more this period.'
    );
  });
});

describe('the budget toasts', () => {
  const detail = {
    budget: 'alice',
    used_hours: 40.2,
    limit_hours: 40,
    period_end: RENEWS,
    retry_at: RENEWS
  };

  it('gives the server message of a warning and of a grant as they are', () => {
    expect(
      budgetEventText(
        event('budget_warned', {
          ...detail,
          used_hours: 32.1,
          message: 'you have used 80% of your GPU-hour budget "alice"'
        }),
        trans,
        NOW
      )
    ).toBe('You have used 80% of your GPU-hour budget "alice".');
    expect(
      budgetEventText(
        event('budget_granted', {
          ...detail,
          message: 'An admin granted 10 GPU-hours to "alice".'
        }),
        trans,
        NOW
      )
    ).toBe('An admin granted 10 GPU-hours to "alice".');
  });

  it('words a hold itself, until when on the user clock, once', () => {
    // the server's sentence says the time in UTC: the toast says it in local time, once
    expect(
      budgetEventText(
        event('budget_held', {
          ...detail,
          period: 'month',
          message:
            'GPU budget "alice" used up: 40.2 of 40 GPU-hours this month. GPU resumes are held until 2027-01-01 00:00 UTC; CPU resumes still work'
        }),
        trans,
        NOW
      )
    ).toBe(
      'GPU-hour budget "alice" is used up: 40.2 of 40 GPU-hours this month. GPU resumes are held until 00:00 on 2027-01-01; resuming on the CPU still works.'
    );
  });

  it.each([
    [
      'budget_warned' as EventType,
      'GPU-hour budget "alice" is nearly used: 40.2 of 40 GPU-hours this period.'
    ],
    [
      'budget_held' as EventType,
      'GPU-hour budget "alice" is used up: 40.2 of 40 GPU-hours this period. GPU resumes are held until 00:00 on 2027-01-01; resuming on the CPU still works.'
    ],
    [
      'budget_granted' as EventType,
      'An admin granted GPU-hours to budget "alice": 40.2 of 40 GPU-hours this period.'
    ]
  ])('words a %s event without a message', (type, text) => {
    expect(budgetEventText(event(type, detail), trans, NOW)).toBe(text);
  });

  it('says when a refused resume may have a GPU again', () => {
    expect(
      budgetRefusedText(
        'GPU-hour budget "alice" is used up',
        RENEWS,
        trans,
        NOW
      )
    ).toBe(
      'GPU-hour budget "alice" is used up. GPU resumes are held until 00:00 on 2027-01-01; resuming on the CPU still works.'
    );
    expect(budgetRefusedText('over budget.', null, trans, NOW)).toBe(
      'Over budget. GPU resumes are held; resuming on the CPU still works.'
    );
    // with the budget's name (the 409 has it), the words are made here
    expect(
      budgetRefusedText(
        'GPU budget "alice" used up: … held until 2027-01-01 00:00 UTC; …',
        RENEWS,
        trans,
        NOW,
        'alice'
      )
    ).toBe(
      'GPU-hour budget "alice" is used up. GPU resumes are held until 00:00 on 2027-01-01; resuming on the CPU still works.'
    );
  });
});
