/**
 * How the panel renders answers that a test server cannot easily produce:
 * a hundred sessions in every state, and a server without our extension.
 * These tests answer the sessions API from the test (page.route), so they
 * check rendering only; the lifecycle itself is tested against the real
 * server in the other specs.
 */
import { expect, test } from './fixtures';
import { openPanel, snap } from './helpers';

const STATES = [
  'active',
  'idle',
  'pausing',
  'paused',
  'waiting',
  'restoring',
  'failed'
];

/**
 * A hundred sessions, cycling through the states, with what each state
 * carries (progress, queue position, countdown, error, checkpoint).
 */
function sessions(round: number): any[] {
  const now = Date.now();
  return Array.from({ length: 100 }, (_, i) => {
    const state = STATES[i % STATES.length];
    return {
      id: `session-${i}`,
      path: `experiments/run-${String(i).padStart(3, '0')}.ipynb`,
      type: 'notebook',
      kernel_id: state === 'paused' ? null : `kernel-${i}`,
      kernel_name: 'python3',
      state,
      idle_seconds: state === 'idle' ? 600 + round : null,
      last_activity: null,
      pause_at:
        state === 'idle' ? new Date(now + 240 * 1000).toISOString() : null,
      policy: state === 'idle' ? 'gpu-default' : null,
      gpu:
        state === 'active' || state === 'idle'
          ? {
              devices: ['GPU-5f1c2e3a-0000'],
              indices: [i % 8],
              memory_bytes: 14.2 * 1024 ** 3,
              utilization: 0
            }
          : null,
      checkpoint:
        state === 'active'
          ? null
          : {
              id: `cp-${i}`,
              created: new Date(now - 3600 * 1000).toISOString(),
              bytes: 6.1e9,
              objects: 4,
              skipped: 0
            },
      progress:
        state === 'pausing' || state === 'restoring'
          ? {
              phase: state === 'pausing' ? 'writing' : 'loading',
              done_bytes: 1.2e9 + round * 1e8,
              total_bytes: 6.1e9
            }
          : null,
      queue_position: state === 'waiting' ? 2 : null,
      error:
        state === 'failed'
          ? {
              message: 'the store is full: 6.1 GB needed, 2.0 GB free',
              reason: 'store',
              state_intact: true
            }
          : null,
      message: state === 'paused' ? 'Paused — 6.1 GB, 4 objects saved' : null
    };
  });
}

test('a hundred sessions render once and update in place', async ({ page }) => {
  // Given a server that tracks a hundred sessions, answering a new round at each poll
  let round = 0;
  await page.route(/\/gpu-pause\/api\/sessions(\?.*)?$/, route =>
    route.fulfill({ json: { sessions: sessions(round++) } })
  );
  await page.reload();

  // When the panel is open
  const panel = await openPanel(page);
  const rows = panel.locator('.jp-GpuPause-row');
  await expect(rows).toHaveCount(100);

  // Then every state shows as a word, not only as a colour
  for (const state of STATES) {
    await expect(
      panel.locator(`.jp-GpuPause-badge[data-state="${state}"]`).first()
    ).toHaveText(state);
  }
  // And each state carries what it needs
  const waiting = rows.filter({ hasText: 'run-004.ipynb' });
  await expect(waiting).toContainText('#2 in line');
  const pausing = rows.filter({ hasText: 'run-002.ipynb' });
  await expect(pausing.locator('progress')).toBeVisible();
  await expect(pausing).toContainText('of 6.1 GB');
  const idle = rows.filter({ hasText: 'run-001.ipynb' });
  await expect(idle).toContainText('GPU 1 · 14.2 GiB');
  await expect(idle).toContainText('pauses in');
  await expect(
    idle.getByRole('button', { name: 'Keep running' })
  ).toBeVisible();
  const failed = rows.filter({ hasText: 'run-006.ipynb' });
  await expect(failed).toContainText('The store is full');
  await expect(failed).toContainText('Your state is intact.');
  await snap(page, '09-hundred-sessions');
  // (and in the dark theme: theme variables only, so it follows)
  await page.theme.setDarkTheme();
  await snap(page, '09b-hundred-sessions-dark');
  await page.theme.setLightTheme();

  // When the panel refreshes, rows are updated in place, not rebuilt
  await rows.first().evaluate(node => ((node as any).__marker = 'kept'));
  const polls = round;
  await page.evaluate(() =>
    (window as any).jupyterapp.commands.execute('jupyter-gpu-pause:refresh')
  );
  await expect.poll(() => round).toBeGreaterThan(polls);
  await expect(rows).toHaveCount(100);
  expect(await rows.first().evaluate(node => (node as any).__marker)).toBe(
    'kept'
  );
});

test('a server without the extension says how to enable it', async ({
  page
}) => {
  // Given a server that does not know the API (an HTML 404, like Jupyter's)
  await page.route(/\/gpu-pause\/api\//, route =>
    route.fulfill({
      status: 404,
      contentType: 'text/html',
      body: '<html>404 : Not Found</html>'
    })
  );
  await page.reload();

  // Then the panel and a notification say what to do
  const panel = await openPanel(page);
  await expect(panel.locator('.jp-GpuPause-banner')).toContainText(
    'jupyter server extension enable jupyter_gpu_pause'
  );
  await expect(panel.locator('.jp-GpuPause-empty')).toBeHidden();
  await expect(
    page.locator('.jp-Notification-Toast-warning').first()
  ).toContainText('server extension is not enabled');
  await snap(page, '10-extension-missing');
});

test('the empty panel explains what it is for', async ({ page }) => {
  await page.route(/\/gpu-pause\/api\/sessions(\?.*)?$/, route =>
    route.fulfill({ json: { sessions: [] } })
  );
  await page.reload();
  const panel = await openPanel(page);
  await expect(panel.locator('.jp-GpuPause-empty')).toContainText(
    'paused to storage so the GPU is released'
  );
  await snap(page, '11-empty');
});

test('the GPU-hours chart shows held and reclaimed hours per day', async ({
  page
}) => {
  // Given a report with two weeks of GPU time, some given back by pauses
  const days = Array.from({ length: 14 }, (_, i) => ({
    day: new Date(Date.now() - (13 - i) * 86400 * 1000)
      .toISOString()
      .slice(0, 10),
    gpu_hours_held: 2 + (i % 5),
    gpu_hours_idle: 1,
    gpu_hours_reclaimed: i % 3
  }));
  const total = {
    gpu_hours_held: days.reduce((a, d) => a + d.gpu_hours_held, 0),
    gpu_hours_idle: 14,
    gpu_hours_reclaimed: days.reduce((a, d) => a + d.gpu_hours_reclaimed, 0)
  };
  await page.route(/\/gpu-pause\/api\/report(\?.*)?$/, route =>
    route.fulfill({
      json: { since: days[0].day, until: '', total, sessions: [], days }
    })
  );
  await page.reload();

  // When the panel opens
  const panel = await openPanel(page);

  // Then the chart draws one held and one reclaimed bar per day, with totals
  const chart = panel.locator('.jp-GpuPause-chart');
  await expect(chart).toBeVisible();
  await expect(chart.locator('rect.jp-GpuPause-bar-held')).toHaveCount(14);
  await expect(chart.locator('rect.jp-GpuPause-bar-reclaimed')).toHaveCount(14);
  await expect(chart).toContainText(
    `Held ${total.gpu_hours_held.toFixed(1)} h (idle 14.0 h) · reclaimed ${total.gpu_hours_reclaimed.toFixed(1)} h`
  );
  await snap(page, '14-gpu-hours-chart');
});

test('the chart stays hidden while no GPU time was recorded', async ({
  page
}) => {
  // Given the real server on a machine without GPUs
  const panel = await openPanel(page);
  // Then the panel shows no empty chart
  await expect(
    panel.locator('.jp-GpuPause-empty, .jp-GpuPause-list').first()
  ).toBeAttached();
  await page.waitForTimeout(2000);
  await expect(panel.locator('.jp-GpuPause-chart')).toBeHidden();
});
