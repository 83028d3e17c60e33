/**
 * One notification per session whose kernel becomes known not to be
 * pausable (the `unpausable` event): the user learns once that its GPU is
 * not given back by pausing, instead of a warning at every idle period.
 */
import { Notification } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';

import { ModelEventListener } from '../eventListener';
import { fileName } from '../format';
import { SessionsModel } from '../model';
import { IEvent } from '../tokens';
import { unpausableEventText } from './text';

/**
 * Construction options of {@link UnpausableNotifier}.
 */
export interface IUnpausableNotifierOptions {
  /** Every tracked session, and the events. */
  model: SessionsModel;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
}

/**
 * Turns `unpausable` events into one warning per session.
 */
export class UnpausableNotifier extends ModelEventListener {
  constructor(options: IUnpausableNotifierOptions) {
    super(options.model);
    this._options = options;
  }

  protected onEvents(model: SessionsModel, events: IEvent[]): void {
    const { trans } = this._options;
    for (const event of events) {
      if (event.type !== 'unpausable' || this._told.has(event.session_id)) {
        continue;
      }
      this._told.add(event.session_id);
      const session = model.byId(event.session_id);
      const path = fileName(session?.path ?? event.session_id);
      Notification.warning(unpausableEventText(path, event, trans), {
        autoClose: false
      });
    }
  }

  private _options: IUnpausableNotifierOptions;
  private _told = new Set<string>();
}
