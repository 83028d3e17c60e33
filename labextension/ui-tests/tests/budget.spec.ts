/**
 * The GPU-hour budget line of the sessions panel: from the real server
 * (jupyter_server_test_config.py configures a budget of 1000 GPU-hours a
 * month, which no test comes near), and a held budget's rendering, answered
 * from the test (a held budget on the shared test server would refuse the
 * other tests' GPU resumes).
 */
import { expect, test } from './fixtures';
import { openPanel, snap } from './helpers';

test("the panel shows the user's budget from the server", async ({ page }) => {
  // Given the test server's budget ("ui", 1000 GPU-hours a month)
  // When the panel is open
  const panel = await openPanel(page);
  // Then one line says how much of it is used this month, in the calm colour
  const line = panel.locator('.jp-GpuPause-budget');
  await expect(line).toContainText(/of 1000 GPU-hours this month/);
  await expect(line).not.toHaveClass(/jp-GpuPause-budget-(warned|held)/);
  await expect(line).toHaveAttribute('title', /GPU-hour budget "ui"/);
});

test('a held budget says until when, and that the CPU still works', async ({
  page
}) => {
  // Given a user whose budget is used up until the first of next month
  const now = new Date();
  const renews = new Date(
    Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1)
  ).toISOString();
  await page.route(/\/gpu-pause\/api\/budget(\?.*)?$/, route =>
    route.fulfill({
      json: {
        admin: false,
        configured: true,
        user: 'alice',
        budgets: [
          {
            name: 'ml-team',
            user: 'alice',
            scope: 'group',
            used_hours: 41.3,
            limit_hours: 40,
            granted_hours: 0,
            period: 'month',
            period_start: new Date(
              Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)
            ).toISOString(),
            period_end: renews,
            warn_at: 0.8,
            hold_at: 1,
            grace: 0.1,
            ratio: 41.3 / 40,
            state: 'held',
            retry_at: renews,
            text: '41.3 of 40 GPU-hours this month'
          }
        ]
      }
    })
  );
  await page.reload();
  // When the panel is open
  const panel = await openPanel(page);
  // Then the line is in the held colour and says what still works
  const line = panel.locator('.jp-GpuPause-budget');
  await expect(line).toHaveClass(/jp-GpuPause-budget-held/);
  await expect(line).toContainText('41.3 of 40 GPU-hours this month');
  await expect(line).toContainText('CPU resume still works');
  await snap(page, '12-budget-held');
});
