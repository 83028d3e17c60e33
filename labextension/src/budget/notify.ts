/**
 * GPU-hour budgets as notifications: a budget nearly used (`budget_warned`),
 * used up so GPU resumes are held (`budget_held`, saying until when and that
 * the CPU still works), and more hours granted by an admin
 * (`budget_granted`). Also the toast of a resume the budget refused, with
 * "Resume on CPU".
 */
import { Notification } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';

import { BUDGET_EXCEEDED, GpuPauseError } from '../api';
import { ModelEventListener } from '../eventListener';
import { SessionsModel } from '../model';
import { CommandIDs, IEvent, ISession, SessionState } from '../tokens';
import { budgetEventText, budgetRefusedText } from './text';

/**
 * States from which a resume on the CPU starts a kernel of its own. A
 * suspended kernel comes back in place, on a GPU: no CPU resume for it.
 */
const CPU_RESUMABLE: ReadonlyArray<SessionState> = [
  'paused',
  'failed',
  'waiting'
];

/**
 * The event types told here.
 */
const BUDGET_EVENTS: ReadonlyArray<string> = [
  'budget_warned',
  'budget_held',
  'budget_granted'
];

/**
 * Construction options of {@link BudgetNotifier}.
 */
export interface IBudgetNotifierOptions {
  /** The events. */
  model: SessionsModel;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
}

/**
 * Turns `budget_*` events into notifications: one per budget, a newer one
 * (held after warned, granted after held) replacing the older.
 */
export class BudgetNotifier extends ModelEventListener {
  constructor(options: IBudgetNotifierOptions) {
    super(options.model);
    this._options = options;
  }

  /**
   * One toast per budget and burst: the server may tell the same change
   * once for each of the user's sessions; the latest one is shown.
   */
  protected onEvents(_: SessionsModel, events: IEvent[]): void {
    const latest = new Map<string, IEvent>();
    for (const event of events) {
      if (BUDGET_EVENTS.includes(event.type)) {
        latest.delete(Private.budgetOf(event));
        latest.set(Private.budgetOf(event), event);
      }
    }
    for (const [budget, event] of latest) {
      this._show(budget, this._toast(event));
    }
  }

  private _toast(event: IEvent): string {
    const text = budgetEventText(event, this._options.trans, Date.now());
    switch (event.type) {
      case 'budget_warned':
        return Notification.warning(text, { autoClose: false });
      case 'budget_held':
        return Notification.error(text, { autoClose: false });
      default:
        return Notification.info(text, { autoClose: 10000 });
    }
  }

  private _show(budget: string, id: string): void {
    const previous = this._toasts.get(budget);
    if (previous && previous !== id) {
      Notification.dismiss(previous);
    }
    this._toasts.set(budget, id);
  }

  private _options: IBudgetNotifierOptions;
  private _toasts = new Map<string, string>();
}

/**
 * Tell a resume the budget refused (409 `budget-exceeded`): the server's
 * message, until when GPU resumes are held, and "Resume on CPU", which
 * still works, for a session with a checkpoint to restore. Returns whether
 * `error` was such a refusal; other errors are left to the caller.
 */
export function notifyBudgetRefusal(
  error: unknown,
  session: ISession | null,
  commands: CommandRegistry,
  trans: TranslationBundle
): boolean {
  if (!(error instanceof GpuPauseError) || error.reason !== BUDGET_EXCEEDED) {
    return false;
  }
  const retryAt = error.detail.retry_at;
  const budget = error.detail.budget;
  const text = budgetRefusedText(
    error.message,
    typeof retryAt === 'string' ? retryAt : null,
    trans,
    Date.now(),
    typeof budget === 'string' ? budget : undefined
  );
  const sessionId = session?.id;
  const offerCpu =
    !!session?.checkpoint && CPU_RESUMABLE.includes(session.state);
  const actions: Notification.IAction[] = offerCpu
    ? [
        {
          label: trans.__('Resume on CPU'),
          caption: trans.__(
            'Start a kernel without a GPU and restore the saved state into it, GPU tensors into CPU memory'
          ),
          callback: () =>
            void commands.execute(CommandIDs.resumeCpu, { sessionId })
        }
      ]
    : [];
  Notification.error(text, { autoClose: false, actions });
  return true;
}

/**
 * Module-private helpers.
 */
namespace Private {
  /**
   * The budget an event concerns; the session's id when the event has no
   * name (a server that leaves it out).
   */
  export function budgetOf(event: IEvent): string {
    const name = event.detail.budget;
    return typeof name === 'string' && name ? name : event.session_id;
  }
}
