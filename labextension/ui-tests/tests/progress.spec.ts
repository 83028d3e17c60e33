/**
 * A pause of 1.2 GB, watched live: the panel row and the toolbar show the
 * server's progress in bytes while the checkpoint is written, then the size
 * once paused, then the restore. The size is what keeps the writing phase
 * (about 0.7 s for 400 MB on the CI machine) well above the panel's
 * one-second poll while an operation runs.
 */
import { expect, test } from './fixtures';
import {
  appendAndRun,
  cellOutput,
  confirmPause,
  openPanel,
  row,
  runAndWait,
  snap,
  toolbarButton
} from './helpers';

test('pausing and restoring show progress in bytes', async ({ page }) => {
  test.setTimeout(240 * 1000);
  const notebook = 'big.ipynb';

  // Given a notebook holding 1.2 GB of arrays
  await page.notebook.createNew(notebook);
  await page.notebook.setCell(
    0,
    'code',
    'import numpy as np\nbig = [np.full(25_000_000, i, dtype=np.float64) for i in range(6)]\nprint(sum(int(b[-1]) for b in big))'
  );
  await runAndWait(page, 0);
  expect(await cellOutput(page, 0)).toBe('15');
  await openPanel(page);
  const line = row(page, notebook);
  await expect(line).toBeVisible();

  // When the user pauses it
  await toolbarButton(page).click();
  await confirmPause(page);

  // Then while pausing the row shows a progress bar with bytes written, and
  // the toolbar says so too (looked at together: the pause lasts seconds)
  const progress = line.locator('.jp-GpuPause-progress');
  await Promise.all([
    expect(line.locator('.jp-GpuPause-badge')).toHaveText('pausing'),
    expect(progress.locator('progress')).toBeVisible(),
    expect(progress).toContainText(/\d+(\.\d)? [kMG]?B of 1.2 GB/),
    expect(toolbarButton(page)).toHaveText(/Pausing…/)
  ]);
  await snap(page, '15-pausing-progress');

  // And once paused, the checkpoint's size
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText('paused', {
    timeout: 120 * 1000
  });
  await expect(line.locator('.jp-GpuPause-details')).toContainText(
    'checkpoint 1.2 GB'
  );
  await expect(progress).toBeHidden();

  // When the user resumes, the restore shows too, and the arrays come back
  await toolbarButton(page).click();
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText(
    /waiting|restoring|active|idle/
  );
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText(/active|idle/, {
    timeout: 120 * 1000
  });
  const check = await appendAndRun(
    page,
    'print(sum(int(b[-1]) for b in big), sum(b.nbytes for b in big))'
  );
  expect(await cellOutput(page, check)).toBe('15 1200000000');
});
