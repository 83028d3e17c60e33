/**
 * The panel hears of a pause or a resume the moment it happens, from
 * jupyter_server's event bus, whoever asked for it: here a script, through
 * the REST API, not the UI. The refresh interval is set to 10 minutes, so
 * no poll can explain an update within seconds: only the event can.
 */
import { galata } from '@jupyterlab/galata';
import type { IJupyterLabPageFixture } from '@jupyterlab/galata';

import { expect, test } from './fixtures';
import {
  appendAndRun,
  cellOutput,
  openPanel,
  row,
  runAndWait,
  serverSession,
  snap,
  toolbarButton
} from './helpers';

const NOTEBOOK = 'scripted.ipynb';

/**
 * The schema id of the server's lifecycle events on the bus.
 */
const SCHEMA = 'https://jupyter-gpu-pause.dev/events/lifecycle';

/**
 * Far longer than the test: any update within it comes from the bus.
 */
const REFRESH_INTERVAL_S = 600;

/**
 * Within this, an update came from the bus (a tiny kernel pauses and
 * resumes in a few seconds; a busy CI machine may take longer).
 */
const BUS_DEADLINE_MS = 30 * 1000;

test.use({
  mockSettings: {
    ...galata.DEFAULT_SETTINGS,
    'jupyter-gpu-pause:plugin': { refreshInterval: REFRESH_INTERVAL_S }
  }
});

/**
 * Record, in the page, this extension's events as the browser receives
 * them from the bus.
 */
async function recordBusEvents(page: IJupyterLabPageFixture): Promise<void> {
  await page.evaluate(schema => {
    const w = window as any;
    w.gpuPauseBusEvents = [];
    w.jupyterapp.serviceManager.events.stream.connect((_: any, e: any) => {
      if (e.schema_id === schema) {
        w.gpuPauseBusEvents.push(e);
      }
    });
  }, SCHEMA);
}

/**
 * The events recorded by {@link recordBusEvents}.
 */
function busEvents(page: IJupyterLabPageFixture): Promise<any[]> {
  return page.evaluate(() => (window as any).gpuPauseBusEvents);
}

/**
 * The id of the kernel the shown notebook is connected to.
 */
function shownKernel(page: IJupyterLabPageFixture): Promise<string | null> {
  return page.evaluate(
    () =>
      (window as any).jupyterapp.shell.currentWidget?.sessionContext?.session
        ?.kernel?.id ?? null
  );
}

test('a pause and a resume made through the REST API show at once, from the event bus', async ({
  page,
  request
}) => {
  test.setTimeout(240 * 1000);

  // Given a notebook holding a variable, listed in the panel
  await page.notebook.createNew(NOTEBOOK);
  await page.notebook.setCell(0, 'code', 'x = 42');
  await runAndWait(page, 0);
  await openPanel(page);
  // (the panel polls every 10 min here: the Refresh command lists it now,
  // and restarts that wait)
  await page.evaluate(() =>
    (window as any).jupyterapp.commands.execute('jupyter-gpu-pause:refresh')
  );
  const line = row(page, NOTEBOOK);
  const badge = line.locator('.jp-GpuPause-badge');
  await expect(badge).toHaveText(/active|idle/);
  const session = await serverSession(request, NOTEBOOK);
  await recordBusEvents(page);

  // When a script pauses it through the REST API
  const paused = await request.post(
    `/gpu-pause/api/sessions/${session.id}/pause`,
    { data: {} }
  );
  expect(paused.ok()).toBe(true);

  // Then the row says paused within seconds, long before any poll
  await expect(badge).toHaveText('paused', { timeout: BUS_DEADLINE_MS });
  // And the user is told, once
  await expect(
    page
      .locator('.jp-Notification-Toast-success')
      .filter({ hasText: `Paused ${NOTEBOOK}` })
  ).toHaveCount(1);
  await expect(toolbarButton(page)).toHaveText('Paused — Resume');
  // (the browser received the event on the bus, with where the session stands)
  const pausedEvent = (await busEvents(page)).find(e => e.type === 'paused');
  expect(pausedEvent).toMatchObject({
    session_id: session.id,
    state: 'paused',
    kernel_id: null,
    reason: 'user'
  });
  expect(pausedEvent.path).toBe(session.path);
  await snap(page, '20-paused-by-script');

  // When the script resumes it
  const resumed = await request.post(
    `/gpu-pause/api/sessions/${session.id}/resume`,
    { data: {} }
  );
  expect(resumed.ok()).toBe(true);

  // Then the row shows it running again within seconds
  await expect(badge).toHaveText(/active|idle/, { timeout: BUS_DEADLINE_MS });
  const running = await serverSession(request, NOTEBOOK);
  expect(running.kernel_id).not.toBeNull();
  const resumedEvent = (await busEvents(page)).find(e => e.type === 'resumed');
  expect(resumedEvent).toMatchObject({
    session_id: session.id,
    kernel_id: running.kernel_id
  });
  // And the open notebook is attached to the new kernel, with x back
  await expect
    .poll(() => shownKernel(page), { timeout: BUS_DEADLINE_MS })
    .toBe(running.kernel_id);
  await expect(toolbarButton(page)).toHaveText(/Pause/);
  const check = await appendAndRun(page, 'print(x)');
  expect(await cellOutput(page, check)).toBe('42');
  await snap(page, '21-resumed-by-script');
});
