/**
 * One notification per pause, or cancel, that an admin asked for on the
 * user's behalf (a `paused` or `cancelled` event whose detail has `by`): a
 * warning that stays until dismissed, saying who and why, with "Resume"
 * after a pause. The usual "Paused" toast gives way to it.
 */
import { Notification } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';

import { ModelEventListener } from '../eventListener';
import { fileName } from '../format';
import { SessionsModel } from '../model';
import { CommandIDs, IEvent } from '../tokens';
import { onBehalfOf, onBehalfText } from './text';

/**
 * Construction options of {@link OnBehalfNotifier}.
 */
export interface IOnBehalfNotifierOptions {
  /** Every tracked session, and the events. */
  model: SessionsModel;
  /** Runs "Resume" of a paused session. */
  commands: CommandRegistry;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
}

/**
 * Turns the events an admin caused into one warning each.
 */
export class OnBehalfNotifier extends ModelEventListener {
  constructor(options: IOnBehalfNotifierOptions) {
    super(options.model);
    this._options = options;
  }

  protected onEvents(model: SessionsModel, events: IEvent[]): void {
    const { commands, trans } = this._options;
    for (const event of events) {
      const key = Private.keyOf(event);
      if (onBehalfOf(event) === null || this._told.has(key)) {
        continue;
      }
      this._told.add(key);
      const sessionId = event.session_id;
      const session = model.byId(sessionId);
      const path = fileName(session?.path ?? sessionId);
      const actions: Notification.IAction[] =
        event.type === 'paused'
          ? [
              {
                label: trans.__('Resume'),
                caption: trans.__('Resume %1 with its variables', path),
                callback: () =>
                  void commands.execute(CommandIDs.resume, { sessionId })
              }
            ]
          : [];
      Notification.warning(onBehalfText(path, event, trans), {
        autoClose: false,
        actions
      });
    }
  }

  private _options: IOnBehalfNotifierOptions;
  private _told = new Set<string>();
}

/**
 * Module-private helpers.
 */
namespace Private {
  /**
   * One event told apart from every other (the records have no sequence
   * number): its time, session and type.
   */
  export function keyOf(event: IEvent): string {
    return `${event.time}|${event.session_id}|${event.type}`;
  }
}
