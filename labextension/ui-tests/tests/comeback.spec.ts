/**
 * Coming back the next morning: a notebook paused yesterday is opened in a
 * new browser page. It opens without a kernel, saying it is paused, and one
 * click on "Paused — Resume" brings the variables back, without a dialog.
 * "Start a new kernel" instead starts an empty kernel; while that kernel has
 * run nothing, the panel still shows one row and Resume restores into it,
 * again with one click.
 */
import { galata, IJupyterLabPageFixture } from '@jupyterlab/galata';
import type { Browser, Locator, Page } from '@playwright/test';

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

const SETUP = "answer = 42\nwords = ['back', 'again']";
const READBACK = 'print(answer, words)';
const READBACK_OK = "42 ['back', 'again']";

/**
 * Create `notebook` with variables, pause it from its toolbar, save and
 * close it: the state of the evening before.
 */
async function pausedAndClosed(
  page: IJupyterLabPageFixture,
  notebook: string
): Promise<void> {
  await page.notebook.createNew(notebook);
  await page.notebook.setCell(0, 'code', SETUP);
  await runAndWait(page, 0);
  await page.notebook.save();
  await openPanel(page);
  await pauseFromToolbar(page, notebook);
  await page.notebook.close();
}

/**
 * A new browser page on the same server, in the test's folder, with the
 * real Jupyter sessions and kernels (not Galata's mocks).
 */
async function newPage(
  browser: Browser,
  baseURL: string,
  tmpPath: string,
  waitForApplication: (page: Page, helpers: any) => Promise<void>
): Promise<IJupyterLabPageFixture> {
  const { page } = await galata.newPage({
    baseURL,
    browser,
    waitForApplication,
    tmpPath,
    mockKernels: false,
    mockSessions: false
  });
  return page;
}

/**
 * The id of the kernel of the notebook shown, or null.
 */
function shownKernel(page: Page): Promise<string | null> {
  return page.evaluate(
    () =>
      (window as any).jupyterapp.shell.currentWidget?.sessionContext?.session
        ?.kernel?.id ?? null
  );
}

/**
 * The notification that says the notebook opened paused, without a kernel.
 */
function pausedToast(page: Page): Locator {
  return page
    .locator('.jp-Notification-Toast-info')
    .filter({ hasText: 'is paused' });
}

/**
 * Click "Paused — Resume" once; the notebook comes back with no dialog, in
 * the kernel the notebook then has, its panel row still the only one.
 */
async function resumeWithOneClick(
  page: IJupyterLabPageFixture,
  notebook: string
): Promise<string | null> {
  const line = row(page, notebook);
  await expect(toolbarButton(page)).toHaveText('Paused — Resume');
  await toolbarButton(page).click();
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText(/active|idle/, {
    timeout: 90 * 1000
  });
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);
  await expect(line).toHaveCount(1);
  const check = await appendAndRun(page, READBACK);
  expect(await cellOutput(page, check)).toBe(READBACK_OK);
  return shownKernel(page);
}

test('a paused notebook opened in a new page starts no kernel and resumes with one click', async ({
  page,
  browser,
  baseURL,
  request,
  tmpPath,
  waitForApplication
}) => {
  test.setTimeout(240 * 1000);
  const notebook = 'comeback.ipynb';

  // Given a notebook with variables, paused, then closed
  await pausedAndClosed(page, notebook);

  // When the user comes back in a new browser page and opens the notebook
  const later = await newPage(browser, baseURL!, tmpPath, waitForApplication);
  try {
    expect(await later.notebook.open(notebook)).toBe(true);

    // Then it opens without a kernel, saying it is paused and offering Resume
    const toast = pausedToast(later);
    await expect(toast).toBeVisible();
    await expect(toast.getByRole('button', { name: 'Resume' })).toBeVisible();
    await expect(
      toast.getByRole('button', { name: 'Start a new kernel' })
    ).toBeVisible();
    expect(await shownKernel(later)).toBeNull();
    const jupyter = await (await request.get('/api/sessions')).json();
    expect(jupyter.filter((s: any) => s.path.endsWith(notebook))).toEqual([]);
    // And the panel shows one row for it, paused
    await openPanel(later);
    const line = row(later, notebook);
    await expect(line).toHaveCount(1);
    await expect(line.locator('.jp-GpuPause-badge')).toHaveText('paused');
    await snap(later, '14-comeback-opened-paused');

    // When the user clicks "Paused — Resume" once, it comes back
    const kernel = await resumeWithOneClick(later, notebook);
    expect(kernel).not.toBeNull();
    expect((await serverSession(request, notebook)).kernel_id).toBe(kernel);
    await snap(later, '15-comeback-resumed');
  } finally {
    await later.context().close();
  }
});

test('"Start a new kernel" on a paused notebook, then Resume: restored into it with one click', async ({
  page,
  browser,
  baseURL,
  request,
  tmpPath,
  waitForApplication
}) => {
  test.setTimeout(240 * 1000);
  const notebook = 'newkernel.ipynb';

  // Given a notebook with variables, paused, then closed
  await pausedAndClosed(page, notebook);

  // When the user opens it in a new page and chooses "Start a new kernel"
  const later = await newPage(browser, baseURL!, tmpPath, waitForApplication);
  try {
    expect(await later.notebook.open(notebook)).toBe(true);
    await pausedToast(later)
      .getByRole('button', { name: 'Start a new kernel' })
      .click();
    await expect.poll(() => shownKernel(later)).not.toBeNull();
    const started = await shownKernel(later);

    // Then that kernel, which has run nothing, waits for the resume: one row
    await expect
      .poll(async () => (await serverSession(request, notebook))?.open_kernel)
      .toBe(started);
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
    await snap(later, '16-comeback-new-kernel-waits');

    // When the user clicks "Paused — Resume" once, the variables come back
    // in that very kernel
    expect(await resumeWithOneClick(later, notebook)).toBe(started);
  } finally {
    await later.context().close();
  }
});
