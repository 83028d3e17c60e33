/**
 * When things do not go the straight way: the user started a new kernel
 * while the notebook was paused (resume must ask before overwriting it),
 * and the store cannot be written (the pause fails, the kernel keeps its
 * variables, and the user is told).
 */
import * as fs from 'fs';

import { expect, test } from './fixtures';
import {
  STORE,
  appendAndRun,
  cellOutput,
  confirmPause,
  openPanel,
  pauseFromToolbar,
  row,
  runAndWait,
  serverSession,
  snap,
  toolbarButton
} from './helpers';

test('resume asks before restoring into a kernel started while paused', async ({
  page
}) => {
  test.setTimeout(180 * 1000);
  const notebook = 'restart.ipynb';

  // Given a paused notebook that had `saved = 'from the checkpoint'`
  await page.notebook.createNew(notebook);
  await page.notebook.setCell(0, 'code', "saved = 'from the checkpoint'");
  await runAndWait(page, 0);
  await openPanel(page);
  await pauseFromToolbar(page, notebook);

  // And the user then started a new kernel in it and set a variable there
  await page.evaluate(() =>
    (window as any).jupyterapp.shell.currentWidget.sessionContext.changeKernel({
      name: 'python3'
    })
  );
  const fresh = await appendAndRun(page, "scratch = 'typed after the pause'");

  // When the user clicks Resume
  await expect(toolbarButton(page)).toHaveText('Paused — Resume');
  await toolbarButton(page).click();

  // Then a dialog asks before overwriting the new kernel's variables
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText('Restore into the running kernel?');
  await snap(page, '12-restore-into-new-kernel');

  // When the user agrees, the saved variables come back in that same kernel
  const kernelBefore = await page.evaluate(
    () =>
      (window as any).jupyterapp.shell.currentWidget.sessionContext.session
        .kernel.id
  );
  await dialog.getByRole('button', { name: 'Restore into it' }).click();
  // (the new kernel's own row merges into the restored session: one row, in
  // one expectation, since the panel may list both while the restore runs)
  await expect(row(page, notebook).locator('.jp-GpuPause-badge')).toHaveText(
    [/active|idle/],
    { timeout: 90 * 1000 }
  );
  const check = await appendAndRun(page, 'print(saved, "|", scratch)');
  expect(await cellOutput(page, check)).toBe(
    'from the checkpoint | typed after the pause'
  );
  expect(fresh).toBeGreaterThan(0);
  const kernelAfter = await page.evaluate(
    () =>
      (window as any).jupyterapp.shell.currentWidget.sessionContext.session
        .kernel.id
  );
  expect(kernelAfter).toBe(kernelBefore);
});

test('a pause the store refuses fails visibly and the kernel keeps its state', async ({
  page,
  request
}) => {
  test.setTimeout(180 * 1000);
  const notebook = 'store-broken.ipynb';

  // Given a notebook with state
  await page.notebook.createNew(notebook);
  await page.notebook.setCell(
    0,
    'code',
    'import numpy as np\nx = np.ones(50_000)'
  );
  await runAndWait(page, 0);
  await openPanel(page);
  const line = row(page, notebook);
  await expect(line).toBeVisible();

  // And a store that cannot be written: its folder is now a file
  const aside = `${STORE}.aside`;
  fs.renameSync(STORE, aside);
  fs.writeFileSync(STORE, 'not a folder');
  try {
    // When the user pauses
    await toolbarButton(page).click();
    await confirmPause(page);

    // Then a notification says the pause failed and the state is intact
    const toast = page
      .locator('.jp-Notification-Toast-error')
      .filter({ hasText: `Pause of ${notebook} failed` });
    await expect(toast).toBeVisible({ timeout: 60 * 1000 });
    await expect(toast).toContainText('still running');
    // And the row is running again, saying why the pause failed
    await expect(line.locator('.jp-GpuPause-badge')).toHaveText(/active|idle/);
    await expect(line.locator('.jp-GpuPause-message')).toContainText(
      'The last pause failed'
    );
    await snap(page, '13-pause-failed');
    const session = await serverSession(request, notebook);
    expect(session.error.state_intact).toBe(true);
  } finally {
    fs.rmSync(STORE);
    fs.renameSync(aside, STORE);
  }

  // And the kernel still has its variables
  const check = await appendAndRun(page, 'print(int(x.sum()))');
  expect(await cellOutput(page, check)).toBe('50000');
});
