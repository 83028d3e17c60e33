/**
 * The researcher's loop in a real Lab, a real server and real kernels:
 * build a small torch model, pause from the notebook toolbar, resume, and
 * the next cell sees the model; a seeded generator, a plotting default and
 * a worker thread: the dialog names the thread first, the resume says what
 * came back, and the next draw is an unpaused run's. Also the pause dialog
 * for a variable that cannot be saved, and a failed resume rendering what
 * happened.
 */
import * as fs from 'fs';
import * as path from 'path';

import { expect, test } from './fixtures';
import {
  STORE,
  appendAndRun,
  runAndWait,
  cellOutput,
  openPanel,
  pauseFromToolbar,
  row,
  serverSession,
  snap,
  toolbarButton
} from './helpers';

const MODEL_CELL = [
  'import torch',
  'torch.manual_seed(0)',
  'model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))',
  'weights_sum = round(float(sum(p.detach().sum() for p in model.parameters())), 6)',
  'print(weights_sum)'
].join('\n');

const CHECK_CELL =
  'print(round(float(sum(p.detach().sum() for p in model.parameters())), 6), weights_sum)';

test('pause from the toolbar, resume, and the next cell sees the model', async ({
  page,
  request
}) => {
  test.setTimeout(240 * 1000);
  const notebook = 'train.ipynb';

  // Given a notebook that built a small torch model
  await page.notebook.createNew(notebook);
  await page.notebook.setCell(0, 'code', MODEL_CELL);
  await runAndWait(page, 0);
  const before = await cellOutput(page, 0);
  expect(before).toMatch(/^-?\d+\.\d+$/);

  // And the GPU sessions panel lists it as running
  await openPanel(page);
  const line = row(page, notebook);
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText(/active|idle/);
  const button = toolbarButton(page);
  await expect(button).toHaveText(/Pause/);
  await snap(page, '01-active');

  // When the user clicks Pause in the notebook toolbar and confirms
  await button.click();
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText('Pause kernel?');
  await dialog.getByRole('button', { name: 'Pause' }).click();

  // Then the row goes through pausing to paused, with the checkpoint size
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText(/pausing|paused/);
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText('paused', {
    timeout: 60 * 1000
  });
  await expect(line.locator('.jp-GpuPause-details')).toContainText(
    /checkpoint \d+(\.\d)? kB/
  );
  // And the notebook says "Paused — Resume", not a bare "No Kernel"
  await expect(button).toHaveText('Paused — Resume');
  await expect(
    page.locator('.jp-Notification-Toast-success').first()
  ).toContainText(new RegExp(`Paused ${notebook}: \\d`));
  await snap(page, '02-paused');
  const paused = await serverSession(request, notebook);
  expect(paused.state).toBe('paused');
  expect(paused.kernel_id).toBeNull();

  // When the user clicks "Paused — Resume"
  await button.click();

  // Then the session is active again and the notebook uses the new kernel
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText(/active|idle/, {
    timeout: 90 * 1000
  });
  const resumed = await serverSession(request, notebook);
  expect(resumed.kernel_id).not.toBeNull();
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
    .toBe(resumed.kernel_id);
  await expect(button).toHaveText(/Pause/);
  await snap(page, '03-resumed');

  // And a new cell printing the restored model shows the same weights
  const check = await appendAndRun(page, CHECK_CELL);
  expect(await cellOutput(page, check)).toBe(`${before} ${before}`);
  await snap(page, '04-restored-cell');
});

const AMBIENT_CELL = [
  'import random, threading, time',
  'import matplotlib',
  'random.seed(7)',
  "matplotlib.rcParams['figure.figsize'] = (16, 8)",
  'twin = random.Random(7)',
  'first, expected = twin.random(), twin.random()',
  'print(random.random() == first)',
  "threading.Thread(target=time.sleep, args=(3600,), name='worker-1', daemon=True).start()"
].join('\n');

const AMBIENT_CHECK =
  "print(random.random() == expected, list(matplotlib.rcParams['figure.figsize']))";

test('the state around the variables travels, and what cannot is named first', async ({
  page,
  request
}) => {
  test.setTimeout(240 * 1000);
  const notebook = 'seeded.ipynb';

  // Given a notebook that seeded `random`, set a plotting default and
  // started a worker thread
  await page.notebook.createNew(notebook);
  await page.notebook.setCell(0, 'code', AMBIENT_CELL);
  await runAndWait(page, 0);
  expect(await cellOutput(page, 0)).toBe('True');
  await openPanel(page);
  const line = row(page, notebook);
  await expect(line).toBeVisible();

  // When the user clicks Pause
  await toolbarButton(page).click();

  // Then the dialog names the thread, which will not run after the resume
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText(
    'Some state will not continue after the resume'
  );
  await expect(dialog).toContainText('Will not continue after the resume:');
  await expect(
    dialog
      .locator('.jp-GpuPause-notCarried li')
      .filter({ hasText: 'thread worker-1' })
  ).toContainText('a running thread cannot travel');
  await snap(page, '22-not-carried-dialog');

  // When the user pauses anyway, then resumes
  await dialog.getByRole('button', { name: 'Pause anyway' }).click();
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText('paused', {
    timeout: 60 * 1000
  });
  await toolbarButton(page).click();
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText(/active|idle/, {
    timeout: 90 * 1000
  });

  // Then the resume's toast says the random state and the plotting settings
  // came back, as the server's report does
  const resumed = await serverSession(request, notebook);
  const text: string = resumed.restore.ambient.text;
  expect(text).toMatch(/random state/i);
  expect(text).toMatch(/plotting settings/);
  const toast = page
    .locator('.jp-Notification-Toast-success')
    .filter({ hasText: `Resumed ${notebook}` });
  await expect(toast).toContainText(text.split(';')[0]);
  // And the panel's row says it too
  await expect(line.locator('.jp-GpuPause-message')).toContainText(text);
  await snap(page, '23-ambient-resumed');

  // And the next draw and the figure size are those of an unpaused run
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
    .toBe(resumed.kernel_id);
  const check = await appendAndRun(page, AMBIENT_CHECK);
  expect(await cellOutput(page, check)).toBe('True [16.0, 8.0]');
});

test('a variable that cannot be saved is named before the pause', async ({
  page,
  request
}) => {
  const notebook = 'open-file.ipynb';

  // Given a notebook holding an open file (files cannot be saved)
  await page.notebook.createNew(notebook);
  await page.notebook.setCell(
    0,
    'code',
    "log = open('train.log', 'w')\nsteps = 41 + 1\nprint(steps)"
  );
  await runAndWait(page, 0);
  expect(await cellOutput(page, 0)).toBe('42');
  await openPanel(page);
  await expect(row(page, notebook)).toBeVisible();

  // When the user clicks Pause
  await toolbarButton(page).click();

  // Then a dialog names the variable and why, and asks to confirm
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText('Some variables cannot be saved');
  await expect(dialog.locator('.jp-GpuPause-skipped')).toContainText('log');
  await snap(page, '05-unsaveable-dialog');

  // When the user cancels, nothing happens: the kernel keeps its state
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  await expect(dialog).toBeHidden();
  const session = await serverSession(request, notebook);
  expect(['active', 'idle']).toContain(session.state);
  const check = await appendAndRun(page, 'print(steps, log.closed)');
  expect(await cellOutput(page, check)).toBe('42 False');

  // When the user registers the open file as required state and pauses
  await appendAndRun(
    page,
    "import jupyter_gpu_pause as gp\ngp.register('log')"
  );
  await toolbarButton(page).click();

  // Then the pause is not offered: it would fail, and the dialog says why
  await expect(dialog).toContainText('This kernel cannot be paused yet');
  await expect(dialog).toContainText('log');
  await snap(page, '05b-registered-unsaveable');
  await dialog.getByRole('button', { name: 'OK' }).click();
  await expect(dialog).toBeHidden();
  expect(['active', 'idle']).toContain(
    (await serverSession(request, notebook)).state
  );
});

test('a resume whose checkpoint is damaged shows the failure and what is safe', async ({
  page,
  request
}) => {
  test.setTimeout(180 * 1000);
  const notebook = 'damaged.ipynb';

  // Given a paused notebook
  await page.notebook.createNew(notebook);
  await page.notebook.setCell(
    0,
    'code',
    'import numpy as np\nx = np.arange(100_000)'
  );
  await runAndWait(page, 0);
  await openPanel(page);
  const line = row(page, notebook);
  await expect(line).toBeVisible();
  await pauseFromToolbar(page, notebook);

  // And its checkpoint was damaged on disk: every blob it wrote flipped
  const session = await serverSession(request, notebook);
  const checkpoints = await (
    await request.get(`/gpu-pause/api/sessions/${session.id}/checkpoints`)
  ).json();
  expect(checkpoints.checkpoints.length).toBeGreaterThan(0);
  let damaged = 0;
  for (const file of walk(path.join(STORE, 'v1', 'blobs'))) {
    const bytes = fs.readFileSync(file);
    bytes[bytes.length - 1] ^= 0xff;
    fs.writeFileSync(file, bytes);
    damaged++;
  }
  expect(damaged).toBeGreaterThan(0);

  // When the user resumes from the panel
  await line.getByRole('button', { name: 'Resume' }).click();

  // Then the row shows failed with the server's sentence, and what is safe
  await expect(line.locator('.jp-GpuPause-badge')).toHaveText('failed', {
    timeout: 60 * 1000
  });
  const failed = await serverSession(request, notebook);
  const message = line.locator('.jp-GpuPause-message');
  await expect(message).toHaveClass(/jp-GpuPause-error/);
  // (the panel capitalises the server's sentence)
  await expect(message).toContainText(failed.error.message.slice(1, 40));
  await expect(message).toContainText('No checkpoint of this session');
  await expect(message).toContainText('Some of your state may be lost.');
  await expect(
    page.locator('.jp-Notification-Toast-error').first()
  ).toContainText(new RegExp(`Resume of ${notebook} failed`));
  await snap(page, '06-failed');
});

/**
 * Every file under a folder.
 */
function walk(dir: string): string[] {
  if (!fs.existsSync(dir)) {
    return [];
  }
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap(entry => {
    const full = path.join(dir, entry.name);
    return entry.isDirectory() ? walk(full) : [full];
  });
}
