/**
 * The rebuild as notifications. Right after a resume that left variables
 * behind, one toast says which, and exactly which cells re-running would
 * make them again, before anything runs ("Re-run cells"; the button's
 * tooltip and the panel show each cell's first line). Then the outcome: what
 * was rebuilt, the cell that failed (nothing was changed), or what a re-run
 * would share ("Re-run anyway"). A rebuild the server ran by itself
 * (`rebuild = "auto"`) is told, never offered.
 */
import { Notification } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';

import { isRebuilding } from '../actions';
import { ModelEventListener } from '../eventListener';
import { fileName } from '../format';
import { SessionsModel } from '../model';
import {
  CommandIDs,
  IEvent,
  IRebuildFailedDetail,
  IRebuildPlan,
  IRebuiltDetail
} from '../tokens';
import {
  cellLines,
  cellsText,
  namesText,
  offerText,
  rebuildFailedText,
  rebuiltText
} from './text';

/**
 * Events after which a session's rebuild toast no longer applies.
 */
const STALE: ReadonlyArray<string> = [
  'paused',
  'discarded',
  'culled',
  'resume_failed'
];

/**
 * Construction options of {@link RebuildNotifier}.
 */
export interface IRebuildNotifierOptions {
  /** Every tracked session, and the events. */
  model: SessionsModel;
  /** Runs the actions of the notifications. */
  commands: CommandRegistry;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
}

/**
 * Turns what a resume could not bring back, and each rebuild, into
 * notifications: one per session, a newer one replacing the older.
 */
export class RebuildNotifier extends ModelEventListener {
  constructor(options: IRebuildNotifierOptions) {
    super(options.model);
    this._options = options;
  }

  protected onEvents(_: SessionsModel, events: IEvent[]): void {
    events.forEach((event, index) => {
      const later = events.slice(index + 1);
      switch (event.type) {
        case 'resumed':
          this._resumed(event, later);
          break;
        case 'rebuilt':
          this._rebuilt(event);
          break;
        case 'rebuild_failed':
          this._failed(event);
          break;
        default:
          if (STALE.includes(event.type)) {
            this._show(event.session_id, null);
          }
      }
    });
  }

  /**
   * What the resume did not bring back, and the plan to rebuild it. Not
   * offered when the rebuild already runs or has ended (the server's
   * `auto`): its outcome follows, or already came in the same burst.
   */
  private _resumed(event: IEvent, later: IEvent[]): void {
    const { model, trans } = this._options;
    const sessionId = event.session_id;
    const plan = event.detail.rebuild as IRebuildPlan | null | undefined;
    if (!plan || (!plan.names?.length && !plan.unbuildable?.length)) {
      this._show(sessionId, null);
      return;
    }
    const settled = later.some(
      e =>
        e.session_id === sessionId &&
        (e.type === 'rebuilt' || e.type === 'rebuild_failed')
    );
    if (settled) {
      return;
    }
    const session = model.byId(sessionId);
    const path = fileName(session?.path ?? sessionId);
    const failed = ((event.detail.failed ?? []) as { name: string }[]).map(
      f => f.name
    );
    const text = trans.__('%1: %2', path, offerText(plan, failed, trans));
    if (!plan.names.length) {
      // Nothing to offer: say what is missing for good, and why.
      this._show(sessionId, Notification.info(text, { autoClose: 10000 }));
      return;
    }
    if (isRebuilding(session)) {
      this._show(
        sessionId,
        Notification.info(
          trans.__(
            'Rebuilding %1 in %2: re-running %3…',
            namesText(plan.names, trans),
            path,
            cellsText(plan.cells, trans)
          ),
          { autoClose: false }
        )
      );
      return;
    }
    this._show(
      sessionId,
      Notification.info(text, {
        autoClose: false,
        actions: [
          {
            label: trans.__('Re-run cells'),
            caption: trans.__('Re-run, in this order:\n%1', cellLines(plan)),
            displayType: 'accent',
            callback: () => this._rebuild(sessionId, false)
          },
          {
            label: trans.__('Show cells'),
            caption: trans.__(
              'Show the plan with each cell in the GPU sessions panel'
            ),
            callback: () =>
              void this._options.commands.execute(CommandIDs.openPanel)
          }
        ]
      })
    );
  }

  private _rebuilt(event: IEvent): void {
    const path = this._path(event);
    const detail = event.detail as IRebuiltDetail;
    const auto = event.reason === 'auto';
    this._show(
      event.session_id,
      Notification.success(
        rebuiltText(path, detail, this._options.trans, auto),
        // Cells the user did not ask to run ran: let that be read.
        { autoClose: auto ? 15000 : 8000 }
      )
    );
  }

  /**
   * A rebuild that did not complete: an error naming the failing cell, or
   * a warning naming what a re-run would share, with "Re-run anyway".
   */
  private _failed(event: IEvent): void {
    const { trans } = this._options;
    const detail = event.detail as IRebuildFailedDetail;
    const text = rebuildFailedText(this._path(event), detail, trans);
    const sessionId = event.session_id;
    if (detail.error_reason === 'needs-confirm') {
      this._show(
        sessionId,
        Notification.warning(text, {
          autoClose: false,
          actions: [
            {
              label: trans.__('Re-run anyway'),
              caption: trans.__(
                'Re-run the cells even though they could change what was restored'
              ),
              displayType: 'warn',
              callback: () => this._rebuild(sessionId, true)
            }
          ]
        })
      );
      return;
    }
    // gp.rebuild() in a cell already printed this below the cell.
    const autoClose = event.reason === 'kernel' ? 8000 : false;
    this._show(sessionId, Notification.error(text, { autoClose }));
  }

  private _rebuild(sessionId: string, confirm: boolean): void {
    const args = confirm ? { sessionId, confirm } : { sessionId };
    void this._options.commands.execute(CommandIDs.rebuild, args);
  }

  private _path(event: IEvent): string {
    const session = this._options.model.byId(event.session_id);
    return fileName(session?.path ?? event.session_id);
  }

  /**
   * Keep one rebuild toast per session: a newer one (or `null`, none)
   * replaces the older one and its now stale actions.
   */
  private _show(sessionId: string, id: string | null): void {
    const previous = this._toasts.get(sessionId);
    if (previous && previous !== id) {
      Notification.dismiss(previous);
    }
    if (id) {
      this._toasts.set(sessionId, id);
    } else {
      this._toasts.delete(sessionId);
    }
  }

  private _options: IRebuildNotifierOptions;
  private _toasts = new Map<string, string>();
}
