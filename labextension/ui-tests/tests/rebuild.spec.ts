/**
 * What a checkpoint cannot hold comes back by re-running the cell that made
 * it: a hash object (it cannot be pickled) is skipped at the pause; after
 * the resume a toast names it and the cell that would make it again, before
 * anything runs, and one click on "Re-run cells" brings it back. The panel
 * shows the same offer, each cell with its first line.
 */
import type { Locator, Page } from '@playwright/test';
import * as fs from 'fs';
import * as path from 'path';

import { expect, test } from './fixtures';
import {
  ARTIFACTS,
  appendAndRun,
  cellOutput,
  keepForDocs,
  openPanel,
  row,
  runAndWait,
  serverSession,
  toolbarButton
} from './helpers';

/**
 * Save a screenshot of a page or one element as `artifacts/<name>.png`. (An
 * element's screenshot waits until it stands still: a toast has slid in.
 * CSS animations stay on: a toast's auto-close timer is one.)
 */
async function snapOf(target: Locator | Page, name: string): Promise<void> {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  await target.screenshot({ path: path.join(ARTIFACTS, `${name}.png`) });
  keepForDocs(name);
}

/**
 * The toast whose text matches `text`.
 */
function toast(page: Page, text: RegExp | string): Locator {
  return page
    .locator('.jp-Notification-Toast-info, .jp-Notification-Toast-success')
    .filter({ hasText: text })
    .first();
}

test('a hash the checkpoint could not hold comes back by re-running its cell', async ({
  page,
  request
}) => {
  test.setTimeout(240 * 1000);
  const notebook = 'rebuild.ipynb';

  // Given a notebook that made a hash object, which cannot be saved
  await page.notebook.createNew(notebook);
  await page.notebook.setCell(0, 'code', 'import hashlib');
  await runAndWait(page, 0);
  await appendAndRun(page, "h = hashlib.sha256(b'abc')");
  await openPanel(page);
  const line = row(page, notebook);
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText(/active|idle/);

  // When the user pauses it (the dialog names `h`: it will not be saved)
  await toolbarButton(page).click();
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog.locator('.jp-GpuPause-skipped')).toContainText('h');
  await dialog.getByRole('button', { name: 'Pause anyway' }).click();
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText('paused', {
    timeout: 60 * 1000
  });

  // And resumes it
  await toolbarButton(page).click();
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText(/active|idle/, {
    timeout: 90 * 1000
  });

  // Then a toast says `h` was not saved and which cell would make it again
  const offer = toast(page, 'was not saved');
  await expect(offer).toContainText(
    /rebuild\.ipynb: `h` was not saved\. Re-run cell \[2\] \((\d+\.\d s|run time unknown)\) to rebuild it\./,
    { timeout: 30 * 1000 }
  );
  const rerun = offer.getByRole('button', { name: 'Re-run cells' });
  // And the button's tooltip shows the cell's first line before it runs
  await expect(rerun).toHaveAttribute(
    'title',
    "Re-run, in this order:\n[2] h = hashlib.sha256(b'abc')"
  );
  await snapOf(offer, '20-rebuild-offer-toast');
  await snapOf(page, '20b-rebuild-offer');

  // And the panel shows the same offer, the cell with its first line, and the button
  const plan = line.locator('.jp-GpuPause-rebuild');
  await expect(plan).toContainText('`h` was not saved. Re-run cell [2]');
  await expect(plan.locator('.jp-GpuPause-cell')).toHaveText([
    "[2]h = hashlib.sha256(b'abc')"
  ]);
  await expect(
    line.getByRole('button', { name: 'Re-run cells' })
  ).toBeVisible();
  await snapOf(page.locator('#jupyter-gpu-pause-panel'), '21-rebuild-panel');

  // When the user clicks "Re-run cells" in the toast
  await rerun.click();

  // Then a toast says `h` was rebuilt by re-running cell [2]
  const done = toast(page, 'Rebuilt');
  await expect(done).toContainText(
    /Rebuilt `h` in rebuild\.ipynb \(re-ran cell \[2\] in (under )?\d+\.\d\d s\)\./,
    { timeout: 60 * 1000 }
  );
  await snapOf(done, '22-rebuilt-toast');
  // And the panel offers nothing more
  await expect(plan).toBeHidden();
  await expect(line.getByRole('button', { name: 'Re-run cells' })).toHaveCount(
    0
  );
  const session = await serverSession(request, notebook);
  expect(session.restore.rebuild).toBeNull();

  // And the notebook, on the resumed kernel, has `h` back
  await expect
    .poll(
      () =>
        page.evaluate(
          () =>
            (window as any).jupyterapp.shell.currentWidget?.sessionContext
              ?.session?.kernel?.id ?? null
        ),
      { timeout: 30 * 1000 }
    )
    .toBe(session.kernel_id);
  const check = await appendAndRun(page, 'h.hexdigest()');
  expect(await cellOutput(page, check)).toContain(
    'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'
  );
  await snapOf(page, '23-rebuilt-cell');
});
