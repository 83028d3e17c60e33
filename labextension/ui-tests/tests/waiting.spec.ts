/**
 * Waiting for a GPU, against the real server and real kernels. The test
 * server allows one GPU session at once (the quota provider) and counts
 * only `python3-gpu` notebooks as GPU sessions (see
 * jupyter_server_test_config.py), so two such notebooks are enough to make
 * a resume wait: one holds the quota, the other waits in line. From there
 * the user leaves the line (Cancel), takes the CPU instead (Resume on CPU
 * now), or lets it continue by itself when the other one pauses.
 */
import type { IJupyterLabPageFixture } from '@jupyterlab/galata';
import type { APIRequestContext, Locator } from '@playwright/test';
import * as path from 'path';

import { expect, test } from './fixtures';
import {
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

const KERNEL = 'python3-gpu';
const HOLDER = 'gpu-holder.ipynb';
const WAITER = 'gpu-waiter.ipynb';

/**
 * The file that lets a held restore finish, in the notebook's folder.
 */
const RESTORE_GATE = 'restore-gate';

/**
 * An on_restore hook (saved with the checkpoint, run by the restore in the
 * new kernel) that keeps the session `restoring` until the test writes
 * RESTORE_GATE, at most 2 min: the state a real checkpoint of gigabytes
 * stays in for a while.
 */
const HOLD_RESTORE_CELL = [
  'import jupyter_gpu_pause as gp',
  '',
  '@gp.on_restore',
  'def hold_restore():',
  '    import os, time',
  '    deadline = time.monotonic() + 120',
  `    while not os.path.exists('${RESTORE_GATE}') and time.monotonic() < deadline:`,
  '        time.sleep(0.1)',
  '',
  'print(hold_restore.__name__)'
].join('\n');

const QUOTA_MESSAGE = 'the limit of 1 GPU session on this machine is in use';

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

/**
 * Wait until the server's session of a notebook is in one of `states`, and
 * return it.
 */
async function sessionIn(
  request: APIRequestContext,
  notebook: string,
  states: string[]
): Promise<any> {
  await expect
    .poll(async () => (await serverSession(request, notebook))?.state, {
      timeout: 90 * 1000
    })
    .toMatch(new RegExp(`^(${states.join('|')})$`));
  return serverSession(request, notebook);
}

/**
 * Resume the paused WAITER from its panel row (`line`) and wait until the
 * row says it waits in line, first, for the quota.
 */
async function resumeIntoLine(
  request: APIRequestContext,
  line: Locator
): Promise<void> {
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText('paused');
  await line.getByRole('button', { name: 'Resume', exact: true }).click();
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText('waiting', {
    timeout: 60 * 1000
  });
  await expect(line.locator('.jp-GpuPause-progressText')).toContainText(
    '#1 in line'
  );
  const waiting = await serverSession(request, WAITER);
  expect(waiting.state).toBe('waiting');
  expect(waiting.queue_position).toBe(1);
  expect(waiting.waiting.reason).toBe('quota-sessions');
}

/**
 * Add a code cell holding `source` at the end of the shown notebook, run it
 * and return its index. The source is set, not typed: typing a Python block
 * would indent its body twice (the editor indents after a colon).
 */
async function appendBlockAndRun(
  page: IJupyterLabPageFixture,
  source: string
): Promise<number> {
  await page.notebook.addCell('code', '');
  const index = (await page.notebook.getCellCount()) - 1;
  await page.evaluate(
    ([i, text]) =>
      (window as any).jupyterapp.shell.currentWidget.content.widgets[
        i
      ].model.sharedModel.setSource(text),
    [index, source] as const
  );
  await runAndWait(page, index);
  return index;
}

/**
 * Wait until the shown notebook uses the kernel the server restored its
 * session into, then run `source` in a new cell there; returns its output.
 */
async function printInRestoredKernel(
  page: IJupyterLabPageFixture,
  kernelId: string,
  source: string
): Promise<string> {
  await expect
    .poll(() => shownKernel(page), { timeout: 30 * 1000 })
    .toBe(kernelId);
  return cellOutput(page, await appendAndRun(page, source));
}

test('a resume beyond the GPU quota waits in line, can leave it, and continues when a GPU frees', async ({
  page,
  request
}) => {
  test.setTimeout(480 * 1000);
  const status = page.locator('#jp-main-statusbar .jp-GpuPause-status');
  const holder = row(page, HOLDER);
  const waiter = row(page, WAITER);

  await test.step('two GPU notebooks, both paused, one resumed: it holds the quota', async () => {
    // Given two notebooks on the GPU kernelspec, each with a variable, both paused
    await page.notebook.createNew(HOLDER, { kernel: KERNEL });
    await page.notebook.setCell(0, 'code', "held = 'from the holder'");
    await runAndWait(page, 0);
    await openPanel(page);
    await pauseFromToolbar(page, HOLDER);

    await page.notebook.createNew(WAITER, { kernel: KERNEL });
    await page.notebook.setCell(0, 'code', "kept = 'from the waiter'");
    await runAndWait(page, 0);
    await pauseFromToolbar(page, WAITER);
    expect((await serverSession(request, HOLDER)).gpu_session).toBe(true);
    expect((await serverSession(request, WAITER)).gpu_session).toBe(true);

    // And the first one resumed from the panel: it takes the one GPU session
    await holder.getByRole('button', { name: 'Resume', exact: true }).click();
    await expect(holder.locator('.jp-GpuPause-badge')).toHaveText(
      /active|idle/,
      { timeout: 90 * 1000 }
    );
    await expect(holder.locator('.jp-GpuPause-details')).toContainText(
      'on GPU'
    );
    const held = await serverSession(request, HOLDER);
    expect(held.device).toBe('gpu');
  });

  await test.step('the second one waits, saying why, where in line and for how long', async () => {
    // When the second one is resumed from the panel
    await resumeIntoLine(request, waiter);

    // Then a notification says so once, in the server's words
    await expect(
      page
        .locator('.jp-Notification-Toast-info')
        .filter({ hasText: `${WAITER}: Waiting for a GPU (#1 in line)` })
    ).toContainText(QUOTA_MESSAGE);
    // And its row says why it waits, its place in line and how long it has waited
    const message = waiter.locator('.jp-GpuPause-message');
    await expect(message).toContainText('Waiting for a GPU (#1 in line)');
    await expect(message).toContainText(QUOTA_MESSAGE);
    const progress = waiter.locator('.jp-GpuPause-progressText');
    await expect(progress).toHaveText(/^#1 in line · waiting \d+ s$/);
    // (and the time waited ticks on)
    const waited = async () =>
      Number(/waiting (\d+) s/.exec(await progress.innerText())?.[1] ?? -1);
    const first = await waited();
    await expect.poll(waited, { timeout: 10 * 1000 }).toBeGreaterThan(first);
    await expect(
      waiter.getByRole('button', { name: 'Cancel', exact: true })
    ).toBeVisible();
    await expect(
      waiter.getByRole('button', { name: 'Resume on CPU now' })
    ).toBeVisible();
    // And the notebook's toolbar and the status bar say it too
    await expect(toolbarButton(page)).toHaveText('Waiting for GPU · #1');
    await expect(status).toContainText('Waiting for GPU · #1');
    await expect(status).toHaveAttribute('data-state', 'waiting');
    await snap(page, '16-waiting-row');
  });

  await test.step('Cancel leaves the line; the session stays paused', async () => {
    // When the user clicks Cancel in the row
    await waiter.getByRole('button', { name: 'Cancel', exact: true }).click();

    // Then the session is paused again, out of the line, its checkpoint kept
    await expect(waiter.locator('.jp-GpuPause-badge')).toHaveText('paused', {
      timeout: 30 * 1000
    });
    await expect(toolbarButton(page)).toHaveText('Paused — Resume');
    const cancelled = await serverSession(request, WAITER);
    expect(cancelled.state).toBe('paused');
    expect(cancelled.queue_position).toBeNull();
    expect(cancelled.checkpoint).not.toBeNull();
    const capacity = await (
      await request.get('/gpu-pause/api/capacity')
    ).json();
    expect(capacity.queue).toEqual([]);
    expect(capacity.usage.sessions).toBe(1);
  });

  await test.step('Resume on CPU now leaves the line and resumes on the CPU', async () => {
    // Given the second one waiting in line again
    await resumeIntoLine(request, waiter);

    // When the user clicks "Resume on CPU now"
    await waiter.getByRole('button', { name: 'Resume on CPU now' }).click();

    // Then it is running at once, on the CPU, and the row says so
    await expect(waiter.locator('.jp-GpuPause-badge')).toHaveText(
      /active|idle/,
      { timeout: 90 * 1000 }
    );
    await expect(
      page
        .locator('.jp-Notification-Toast-success')
        .filter({ hasText: `Resumed ${WAITER} on the CPU` })
    ).toBeVisible();
    await expect(waiter.locator('.jp-GpuPause-details')).toContainText(
      'on CPU'
    );
    await expect(status).toContainText('On CPU');
    const onCpu = await serverSession(request, WAITER);
    expect(onCpu.device).toBe('cpu');
    expect(onCpu.gpu_session).toBe(false);
    // (the other one still holds the quota)
    expect((await serverSession(request, HOLDER)).state).toMatch(
      /^(active|idle)$/
    );
    await snap(page, '17-resumed-on-cpu');

    // And its variable is back, in a kernel that sees no GPU
    expect(
      await printInRestoredKernel(
        page,
        onCpu.kernel_id,
        "import os\nprint(kept, '|', repr(os.environ.get('CUDA_VISIBLE_DEVICES')))"
      )
    ).toBe("from the waiter | ''");
  });

  await test.step('a waiting resume continues by itself when the GPU frees', async () => {
    // Given the second one holding its next restore until the test has seen
    // it begin (a tiny checkpoint restores faster than the panel's poll)
    const hook = await appendBlockAndRun(page, HOLD_RESTORE_CELL);
    expect(await cellOutput(page, hook)).toBe('hold_restore');
    // And paused again, then waiting in line
    await pauseFromToolbar(page, WAITER);
    await resumeIntoLine(request, waiter);
    await expect(toolbarButton(page)).toHaveText('Waiting for GPU · #1');
    // (long enough that the resumed notification reports the wait: it
    // mentions waits of a second or more, and a tiny pause frees the GPU in
    // less than that)
    const progress = waiter.locator('.jp-GpuPause-progressText');
    await expect(progress).toHaveText(/waiting ([2-9]|\d\d+) s$/, {
      timeout: 15 * 1000
    });

    // When the first one is paused from the panel
    await holder.getByRole('button', { name: 'Pause', exact: true }).click();
    await confirmPause(page);

    // Then a notification says the GPU is free and the restore has begun
    const free = page
      .locator('.jp-Notification-Toast-info')
      .filter({ hasText: `${WAITER}: a GPU is free — restoring now` });
    await expect(free).toBeVisible({ timeout: 60 * 1000 });
    await expect(holder.locator('.jp-GpuPause-badge')).toHaveText('paused');
    await expect(waiter.locator('.jp-GpuPause-badge')).toHaveText('restoring');
    await expect(toolbarButton(page)).toHaveText(/^Restoring…/);
    await snap(page, '18-gpu-free-notification');

    // When the restore may finish
    const folder = path.posix.dirname(
      (await serverSession(request, WAITER)).path
    );
    const gate = await request.put(`/api/contents/${folder}/${RESTORE_GATE}`, {
      data: { type: 'file', format: 'text', content: '' }
    });
    expect(gate.ok()).toBe(true);

    // Then the second one runs again, on the GPU, having waited in line
    await expect(waiter.locator('.jp-GpuPause-badge')).toHaveText(
      /active|idle/,
      { timeout: 60 * 1000 }
    );
    await expect(
      page
        .locator('.jp-Notification-Toast-success')
        .filter({ hasText: `Resumed ${WAITER}` })
    ).toContainText(/It waited \d+ s for a GPU/);
    await expect(waiter.locator('.jp-GpuPause-details')).toContainText(
      'on GPU'
    );
    await expect(status).toContainText('On GPU');
    const resumed = await sessionIn(request, WAITER, ['active', 'idle']);
    expect(resumed.device).toBe('gpu');
    const events = await (
      await request.get(`/gpu-pause/api/events?session_id=${resumed.id}`)
    ).json();
    const last = events.events.filter((e: any) => e.type === 'resumed').pop();
    expect(last.detail.device).toBe('gpu');
    expect(last.detail.granted_at).not.toBeNull();

    // With its variable intact
    expect(
      await printInRestoredKernel(page, resumed.kernel_id, 'print(kept)')
    ).toBe('from the waiter');
    await snap(page, '19-continued-by-itself');
  });
});
