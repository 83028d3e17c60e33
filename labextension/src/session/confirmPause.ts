/**
 * The question before a pause. The dry run (`POST check`) says what would
 * not come back: variables that cannot be saved, and the kernel's state
 * that cannot continue after the resume (a running thread, a child
 * process…). The user sees them, each with why, before choosing; a
 * registered variable that cannot be saved stops the pause before it
 * starts, since the server would refuse it.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import type { GpuPauseAPI } from '../api';
import { ICheckReport, IGpuPauseSettings, ISession } from '../tokens';

/**
 * What the question before a pause needs.
 */
export interface IConfirmPauseDeps {
  /** The API client, for the dry run. */
  api: Pick<GpuPauseAPI, 'check'>;
  /** The settings in force; read at each pause. */
  settings: () => Readonly<IGpuPauseSettings>;
  /** Translation of user-visible strings. */
  trans: TranslationBundle;
}

/**
 * Ask before a pause: always when some variables cannot be saved or some
 * of the kernel's state will not continue after the resume (they are
 * listed), else when the user's setting says so. Resolves whether to
 * pause.
 */
export async function confirmPause(
  session: ISession,
  deps: IConfirmPauseDeps
): Promise<boolean> {
  const { api, settings, trans } = deps;
  const check = await api.check(session.id).catch(() => null);
  if (check?.error) {
    // A registered variable cannot be saved: the pause would fail and
    // change nothing, so say why instead of offering it.
    await showDialog({
      title: trans.__('This kernel cannot be paused yet'),
      body: trans.__(
        'A registered variable cannot be saved, so a pause would fail (and change nothing): %1. Fix or unregister it (gp.unregister) and try again.',
        check.error
      ),
      buttons: [Dialog.okButton({ label: trans.__('OK') })]
    });
    return false;
  }
  const skipped = check?.skipped ?? [];
  const notCarried = check?.ambient?.not_carried ?? [];
  const lost = skipped.length > 0 || notCarried.length > 0;
  if (!lost && !settings().confirmBeforePause) {
    return true;
  }
  const result = await showDialog({
    title: skipped.length
      ? trans.__('Some variables cannot be saved')
      : notCarried.length
        ? trans.__('Some state will not continue after the resume')
        : trans.__('Pause kernel?'),
    body: Private.pauseBody(session, check, trans),
    buttons: [
      Dialog.cancelButton({ label: trans.__('Cancel') }),
      lost
        ? Dialog.warnButton({ label: trans.__('Pause anyway') })
        : Dialog.okButton({ label: trans.__('Pause') })
    ]
  });
  return result.button.accept;
}

/**
 * Module-private helpers.
 */
namespace Private {
  /**
   * The body of the pause dialog: what will happen and, when some
   * variables cannot be saved, which ones and why; when some of the
   * kernel's state cannot travel (a running thread, a child process, an
   * open connection…), what and why.
   */
  export function pauseBody(
    session: ISession,
    check: ICheckReport | null,
    trans: TranslationBundle
  ): Widget {
    const node = document.createElement('div');
    node.className = 'jp-GpuPause-dialog';
    const intro = document.createElement('p');
    intro.textContent = trans.__(
      'The kernel of %1 will be saved to storage and shut down, releasing its GPU. Resume it later to get its variables back.',
      session.path
    );
    node.appendChild(intro);
    const skipped = check?.skipped ?? [];
    if (skipped.length) {
      const warn = document.createElement('p');
      warn.textContent = trans.__(
        'These variables cannot be saved and will be lost:'
      );
      node.appendChild(warn);
      node.appendChild(reasonList(skipped, 'jp-GpuPause-skipped'));
    }
    const notCarried = check?.ambient?.not_carried ?? [];
    if (notCarried.length) {
      const heading = document.createElement('p');
      heading.className = 'jp-GpuPause-notCarriedHeading';
      heading.textContent = trans.__('Will not continue after the resume:');
      node.appendChild(heading);
      node.appendChild(reasonList(notCarried, 'jp-GpuPause-notCarried'));
    }
    return new Widget({ node });
  }

  /**
   * A list of names, each as code followed by why. The API guarantees only
   * the name of a skipped object; a reason the agent did not give is left
   * out.
   */
  function reasonList(
    items: ReadonlyArray<{ name: string; reason?: unknown }>,
    className: string
  ): HTMLUListElement {
    const list = document.createElement('ul');
    list.className = className;
    for (const item of items) {
      const li = document.createElement('li');
      const name = document.createElement('code');
      name.textContent = item.name;
      li.appendChild(name);
      if (typeof item.reason === 'string') {
        li.appendChild(document.createTextNode(` — ${item.reason}`));
      }
      list.appendChild(li);
    }
    return list;
  }
}
