/**
 * Smoke test: JupyterLab loads with our extension, the server extension
 * answers with the test policy, and a running notebook shows our status item.
 */
import { expect, test } from './fixtures';

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
