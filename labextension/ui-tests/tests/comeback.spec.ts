/**
 * Coming back the next morning: a notebook paused yesterday is opened in a
 * new browser page. JupyterLab starts a kernel for it on opening; that
 * kernel has run nothing, so the panel still shows one row for the
 * notebook, and one click on "Paused — Resume" brings the variables back
 * into it, without a dialog.
 */
import { galata } from '@jupyterlab/galata';

import { expect, test } from './fixtures';
import {
  appendAndRun,
  cellOutput,
  openPanel,
  pauseFromToolbar,
  row,
  runAndWait,
  serverSession,
  snap,
  toolbarButton
} from './helpers';

test('a paused notebook opened in a new page resumes with one click', async ({
  page,
  browser,
  baseURL,
  request,
  tmpPath,
  waitForApplication
}) => {
  test.setTimeout(240 * 1000);
  const notebook = 'comeback.ipynb';

  // Given a notebook with variables, paused from its toolbar, then closed
  await page.notebook.createNew(notebook);
  await page.notebook.setCell(
    0,
    'code',
    "answer = 42\nwords = ['back', 'again']"
  );
  await runAndWait(page, 0);
  await page.notebook.save();
  await openPanel(page);
  await pauseFromToolbar(page, notebook);
  await page.notebook.close();

  // When the user comes back in a new browser page and opens the notebook
  const { page: later } = await galata.newPage({
    baseURL: baseURL!,
    browser,
    waitForApplication,
    tmpPath,
    mockKernels: false,
    mockSessions: false
  });
  try {
    expect(await later.notebook.open(notebook)).toBe(true);
    // (JupyterLab starts a kernel for it, as for any notebook it opens)
    const kernel = async (): Promise<string | null> =>
      later.evaluate(
        () =>
          (window as any).jupyterapp.shell.currentWidget?.sessionContext
            ?.session?.kernel?.id ?? null
      );
    await expect.poll(kernel, { timeout: 60 * 1000 }).not.toBeNull();
    const opened = await kernel();
    await expect
      .poll(async () => (await serverSession(request, notebook))?.open_kernel)
      .toBe(opened);

    // Then the panel shows one row for the notebook: paused, its kernel waiting
    await openPanel(later);
    await later.evaluate(() =>
      (window as any).jupyterapp.commands.execute('jupyter-gpu-pause:refresh')
    );
    const line = row(later, notebook);
    await expect(line).toHaveCount(1);
    await expect(line.locator('.jp-GpuPause-badge')).toHaveText('paused');
    await expect(line.locator('.jp-GpuPause-message')).toContainText(
      'new kernel that has run nothing'
    );
    await expect(toolbarButton(later)).toHaveText('Paused — Resume');
    await snap(later, '14-comeback-opened');

    // When the user clicks "Paused — Resume" once
    await toolbarButton(later).click();

    // Then the notebook comes back without any dialog, in the kernel Lab
    // started, still one row
    await expect(line.locator('.jp-GpuPause-badge')).toHaveText(/active|idle/, {
      timeout: 90 * 1000
    });
    await expect(later.locator('.jp-Dialog')).toHaveCount(0);
    await expect(line).toHaveCount(1);
    const check = await appendAndRun(later, 'print(answer, words)');
    expect(await cellOutput(later, check)).toBe("42 ['back', 'again']");
    expect(await kernel()).toBe(opened);
    await snap(later, '15-comeback-resumed');
  } finally {
    await later.context().close();
  }
});
