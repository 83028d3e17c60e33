/**
 * An admin's idle policy warns in Lab before it acts, and "Keep running"
 * postpones the pause. The test server's policy `ui-test-short` governs
 * only the `python3-short` kernelspec: it warns after 10 s idle and pauses
 * after 60 s (see jupyter_server_test_config.py).
 */
import { expect, test } from './fixtures';
import {
  appendAndRun,
  cellOutput,
  confirmPause,
  runAndWait,
  openPanel,
  row,
  serverSession,
  snap,
  toolbarButton
} from './helpers';

test('an idle warning offers Keep running, which postpones the pause', async ({
  page,
  request
}) => {
  test.setTimeout(240 * 1000);
  const notebook = 'warned.ipynb';

  // Given a notebook on the kernelspec the short policy governs
  await page.notebook.createNew(notebook, { kernel: 'python3-short' });
  // The idle clock starts at the cell below: by then the server knows the notebook by its
  // name (Lab creates it as Untitled.ipynb and renames it), which the warning then names.
  await expect
    .poll(async () => (await serverSession(request, notebook))?.path ?? null, {
      timeout: 30 * 1000
    })
    .not.toBeNull();
  await page.notebook.setCell(0, 'code', 'answer = 42');
  await runAndWait(page, 0);
  await openPanel(page);
  const line = row(page, notebook);
  await expect(line).toBeVisible();

  // When it sits idle past the warning time
  const toast = page
    .locator('.jp-Notification-Toast-warning')
    .filter({ hasText: notebook });
  await expect(toast).toBeVisible({ timeout: 60 * 1000 });

  // Then the warning says when it will be paused, with both actions
  await expect(toast).toContainText('will be paused at');
  await expect(
    toast.getByRole('button', { name: 'Keep running' })
  ).toBeVisible();
  await expect(toast.getByRole('button', { name: 'Pause now' })).toBeVisible();
  // And the panel and the toolbar count down to the pause
  await expect(line.locator('.jp-GpuPause-details')).toContainText('pauses in');
  await expect(toolbarButton(page)).toContainText('pauses in');
  await snap(page, '07-idle-warning');
  const warned = await serverSession(request, notebook);
  const firstPauseAt = Date.parse(warned.pause_at);
  expect(firstPauseAt).toBeGreaterThan(Date.now());

  // When the user clicks Keep running
  await toast.getByRole('button', { name: 'Keep running' }).click();

  // Then the warning goes away and the pause moves later
  await expect(toast).toBeHidden();
  await expect
    .poll(async () => (await serverSession(request, notebook)).pause_at)
    .toBeNull();
  const events = await (
    await request.get(`/gpu-pause/api/events?session_id=${warned.id}`)
  ).json();
  expect(events.events.map((e: any) => e.type)).toContain('keepalive');
  await snap(page, '08-kept-running');

  // And once the first pause time has passed, the kernel still runs
  await page.waitForTimeout(Math.max(0, firstPauseAt - Date.now()) + 3000);
  const later = await serverSession(request, notebook);
  expect(['active', 'idle']).toContain(later.state);
  if (later.pause_at) {
    expect(Date.parse(later.pause_at)).toBeGreaterThan(firstPauseAt);
  }
  const check = await appendAndRun(page, 'print(answer)');
  expect(await cellOutput(page, check)).toBe('42');
});

test('Pause now in the warning pauses the kernel at once', async ({
  page,
  request
}) => {
  test.setTimeout(180 * 1000);
  const notebook = 'pause-now.ipynb';

  // Given a warned notebook on the short policy's kernelspec
  await page.notebook.createNew(notebook, { kernel: 'python3-short' });
  // The idle clock starts at the cell below: by then the server knows the notebook by its
  // name (Lab creates it as Untitled.ipynb and renames it), which the warning then names.
  await expect
    .poll(async () => (await serverSession(request, notebook))?.path ?? null, {
      timeout: 30 * 1000
    })
    .not.toBeNull();
  await page.notebook.setCell(0, 'code', "note = 'kept'");
  await runAndWait(page, 0);
  await openPanel(page);
  const toast = page
    .locator('.jp-Notification-Toast-warning')
    .filter({ hasText: notebook });
  await expect(toast).toBeVisible({ timeout: 60 * 1000 });

  // When the user clicks Pause now and confirms
  await toast.getByRole('button', { name: 'Pause now' }).click();
  await confirmPause(page);

  // Then it is paused well before the policy would have, and the warning is gone
  await expect(row(page, notebook).locator('.jp-GpuPause-badge')).toHaveText(
    'paused',
    { timeout: 30 * 1000 }
  );
  await expect(toast).toBeHidden();
  await expect(toolbarButton(page)).toHaveText('Paused — Resume');
});
