/**
 * Which notebook and which session an action means: the session its
 * arguments name (a session id, else a notebook path), else the current
 * notebook's. One rule for the commands of every feature, the kernel gate
 * and the notifications, so the palette, the panel, the toolbar and the
 * toasts always act on the same session.
 */
import type { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import type { SessionsModel } from './model';
import type { ISession, ISessionCommandArgs } from './tokens';

/**
 * The server path of a notebook: the one its Jupyter session uses.
 */
export function notebookPath(panel: NotebookPanel): string {
  return panel.sessionContext.path || panel.context.localPath;
}

/**
 * The notebook path the arguments name, else the current notebook's;
 * `null` when there is neither.
 */
export function targetPath(
  args: ISessionCommandArgs,
  tracker: INotebookTracker | null
): string | null {
  const current = tracker?.currentWidget;
  return args.path ?? (current ? notebookPath(current) : null);
}

/**
 * The session the arguments name, as last polled: by id when they give
 * one, else by notebook path (see {@link targetPath}); `null` when the
 * model does not know it.
 */
export function targetSession(
  args: ISessionCommandArgs,
  model: Pick<SessionsModel, 'byId' | 'byPath'>,
  tracker: INotebookTracker | null
): ISession | null {
  return args.sessionId
    ? model.byId(args.sessionId)
    : model.byPath(targetPath(args, tracker));
}
