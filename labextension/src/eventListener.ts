/**
 * What every notifier of lifecycle events shares: it listens to the
 * sessions model's events from construction, and stops on dispose (the
 * notifications it opened stay).
 */
import { IDisposable } from '@lumino/disposable';

import { SessionsModel } from './model';
import { IEvent } from './tokens';

/**
 * A disposable listener of {@link SessionsModel.eventsReceived}; a subclass
 * says what each batch of events does (`onEvents`) and drops any other
 * connection of its own in `disconnect`.
 */
export abstract class ModelEventListener implements IDisposable {
  constructor(model: SessionsModel) {
    this._model = model;
    model.eventsReceived.connect(this.onEvents, this);
  }

  /**
   * Whether the listener has been disposed.
   */
  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * Stop listening; open notifications stay.
   */
  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._model.eventsReceived.disconnect(this.onEvents, this);
    this.disconnect();
  }

  /**
   * The new events of one poll, oldest first.
   */
  protected abstract onEvents(model: SessionsModel, events: IEvent[]): void;

  /**
   * Drop the subclass's other connections (none by default).
   */
  protected disconnect(): void {
    // nothing else to drop
  }

  private _isDisposed = false;
  private _model: SessionsModel;
}
