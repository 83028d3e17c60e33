/**
 * After a resume, an open notebook goes on in the kernel the resume
 * started, so the next cell sees the restored variables. The server already
 * attached that kernel to the notebook's Jupyter session; Lab's copy of the
 * session learns it from a refresh, or, when Lab had dropped the session
 * while the kernel was paused, by joining it.
 */
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Session } from '@jupyterlab/services';

import { notebookPath } from '../target';

/**
 * Point every notebook open at `path` to the kernel `kernelId`; a notebook
 * already on it is left alone.
 */
export async function reattach(
  tracker: INotebookTracker | null,
  sessions: Session.IManager,
  path: string,
  kernelId: string
): Promise<void> {
  const panels: NotebookPanel[] = [];
  tracker?.forEach(panel => {
    if (notebookPath(panel) === path) {
      panels.push(panel);
    }
  });
  if (!panels.length || !kernelId) {
    return;
  }
  await sessions.refreshRunning().catch(() => undefined);
  for (const panel of panels) {
    if (panel.sessionContext.session?.kernel?.id !== kernelId) {
      await panel.sessionContext.changeKernel({ id: kernelId }).catch(error => {
        console.warn('jupyter-gpu-pause: could not reattach', path, error);
      });
    }
  }
}
