/**
 * A kernel that cannot be paused (here a bash kernel: not Python) is said
 * so once, in the panel row, in the notebook toolbar and in one
 * notification; pausing it is never offered.
 */
import { expect, test } from './fixtures';
import { openPanel, row, serverSession, snap, toolbarButton } from './helpers';

test('a bash kernel is named as one that cannot be paused', async ({
  page,
  request
}) => {
  test.setTimeout(120 * 1000);
  const notebook = 'shell.ipynb';

  // Given Lab showing the GPU sessions (its first look at the server is done: what happened
  // before it is history, not news), and then a notebook on a bash kernel
  const panel = await openPanel(page);
  await expect(panel).toContainText('No sessions yet');
  await page.notebook.createNew(notebook, { kernel: 'bash' });
  await expect
    .poll(async () => (await serverSession(request, notebook))?.path ?? null, {
      timeout: 30 * 1000
    })
    .not.toBeNull();

  // When the user looks at it
  await openPanel(page);
  const line = row(page, notebook);

  // Then the server says it cannot be paused, and Lab shows it in the row and the toolbar
  const session = await serverSession(request, notebook);
  expect(session.pausable.ok).toBe(false);
  expect(session.pausable.reason).toBe('unsupported-kernel');
  await expect(line).toContainText('Cannot be paused');
  await expect(line).toContainText('bash');
  await expect(toolbarButton(page)).toContainText('Cannot be paused');
  // one notification says what it means for the GPU
  const toast = page
    .locator('.jp-Notification-Toast-warning')
    .filter({ hasText: 'cannot be paused' });
  await expect(toast).toHaveCount(1);
  await expect(toast).toContainText('not given back by pausing');
  // pausing it is not offered
  await expect(line.getByRole('button', { name: /^Pause/ })).toHaveCount(0);
  await snap(page, '24-unpausable');
});
