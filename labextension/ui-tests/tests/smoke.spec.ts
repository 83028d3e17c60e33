/**
 * Smoke tests: JupyterLab loads with our extension, the server extension
 * answers with the test policy, a running notebook shows our status item,
 * the palette lists our commands, and the settings take effect.
 */
import { galata } from '@jupyterlab/galata';

import { expect, test } from './fixtures';
import { openPanel, row, runAndWait, toolbarButton } from './helpers';

const PLUGIN_ID = 'jupyter-gpu-pause:plugin';

test('Lab loads the extension and shows the GPU status item', async ({
  page
}, testInfo) => {
  // Given JupyterLab started with jupyter_server_test_config.py
  // Then the page lists our prebuilt extension and its plugin is active
  const extensions = await page.evaluate(() => {
    const node = document.getElementById('jupyter-config-data');
    const config = JSON.parse(node?.textContent ?? '{}');
    return (config.federated_extensions ?? []).map(
      (ext: { name: string }) => ext.name
    );
  });
  expect(extensions).toContain('jupyter-gpu-pause');
  expect(
    await page.evaluate(
      id => (window as any).jupyterapp.isPluginActivated(id),
      PLUGIN_ID
    )
  ).toBe(true);

  // And the server extension answers with the short test policy
  const response = await page.request.get('/gpu-pause/api/policies');
  expect(response.status()).toBe(200);
  const body = await response.json();
  expect(body.policies).toEqual(
    expect.arrayContaining([
      expect.objectContaining({ name: 'ui-test-short', action: 'pause' })
    ])
  );

  // When a new notebook runs a cell
  await page.notebook.createNew('smoke.ipynb');
  await page.notebook.setCell(0, 'code', 'x = 1');
  await page.notebook.runCell(0);

  // Then the cell ran in a live kernel
  await expect(
    page.locator('.jp-Notebook .jp-Cell .jp-InputPrompt').first()
  ).toHaveText('[1]:');

  // And the status bar shows our item for the notebook's live session
  // (the label's wording varies: "GPU: active", "No GPU · idle 12 s", ...)
  const status = page.locator('#jp-main-statusbar .jp-GpuPause-status');
  await expect(status).toBeVisible();
  await expect(status).toContainText('GPU');
  await expect(status).toHaveAttribute('data-state', /^(active|idle)$/);

  const screenshot = testInfo.outputPath('smoke.png');
  await page.screenshot({ path: screenshot });
  await testInfo.attach('smoke', {
    path: screenshot,
    contentType: 'image/png'
  });
});

test('the palette lists the GPU Pause commands', async ({ page }) => {
  // Given an open notebook with a running kernel
  await page.notebook.createNew('palette.ipynb');
  await page.notebook.setCell(0, 'code', 'z = 3');
  await runAndWait(page, 0);
  await openPanel(page);
  await expect(row(page, 'palette.ipynb')).toBeVisible();
  // Then every command is registered
  const ids = [
    'pause',
    'resume',
    'cancel',
    'keep-running',
    'discard',
    'open-panel',
    'refresh'
  ].map(name => `jupyter-gpu-pause:${name}`);
  const registered = await page.evaluate(
    list =>
      list.filter(id => (window as any).jupyterapp.commands.hasCommand(id)),
    ids
  );
  expect(registered).toEqual(ids);
  // And typing "GPU" in the palette offers those that apply now
  await page.keyboard.press('Control+Shift+C');
  const palette = page.locator('#command-palette');
  await expect(palette).toBeVisible();
  await palette.locator('input').fill('GPU');
  for (const label of [
    'Pause Kernel and Release GPU',
    'Show GPU Sessions',
    'Refresh GPU Sessions'
  ]) {
    await expect(palette.getByText(label, { exact: true })).toBeVisible();
  }
  await page.keyboard.press('Escape');
});

test.describe('with the status item off and no pause confirmation', () => {
  // Galata serves the settings from the test: these are the user's choices.
  test.use({
    mockSettings: {
      ...galata.DEFAULT_SETTINGS,
      'jupyter-gpu-pause:plugin': {
        showStatusBar: false,
        confirmBeforePause: false
      }
    }
  });

  test('the status item is hidden and Pause does not ask', async ({ page }) => {
    await page.notebook.createNew('settings.ipynb');
    await page.notebook.setCell(0, 'code', 'y = 2');
    await runAndWait(page, 0);
    await openPanel(page);
    const line = row(page, 'settings.ipynb');
    await expect(line).toBeVisible();

    // Then the status bar has no GPU item
    await expect(page.locator('.jp-GpuPause-status')).toBeHidden();
    // And Pause pauses without asking (nothing here cannot be saved)
    await toolbarButton(page).click();
    await expect(line.locator('.jp-GpuPause-badge')).toHaveText('paused', {
      timeout: 60 * 1000
    });
    await expect(page.locator('.jp-Dialog')).toHaveCount(0);
  });
});
