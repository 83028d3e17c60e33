/**
 * What the UI tests do over and over: open the GPU sessions panel, find a
 * notebook's row and toolbar button, read the server's view of a session,
 * and save a screenshot of a state under `artifacts/` to look at.
 */
import type { IJupyterLabPageFixture } from '@jupyterlab/galata';
import type { APIRequestContext, Locator, Page } from '@playwright/test';
import * as fs from 'fs';
import * as path from 'path';

import { expect } from './fixtures';

/**
 * Where screenshots of each state are kept (gitignored; CI keeps them).
 */
export const ARTIFACTS = path.resolve(__dirname, '..', 'artifacts');

/**
 * Where the test server keeps checkpoints (see jupyter_server_test_config.py).
 */
export const STORE = path.resolve(__dirname, '..', '.state', 'store');

/**
 * Where the docs keep the screenshots they show.
 */
const DOCS_SCREENSHOTS = path.resolve(
  __dirname,
  '..',
  '..',
  '..',
  'docs',
  'screenshots'
);

/**
 * The screenshots the docs show, by the name the specs give them: every UI test run takes them
 * anew, so the docs never show a UI that is gone (tests/test_docs_screenshots.py checks that
 * every image the docs show is one of these, or named there as needing a GPU).
 */
export const DOC_SHOTS: Record<string, string> = {
  '02-paused': 'paused',
  '05-unsaveable-dialog': 'unsaveable-dialog',
  '07-idle-warning': 'idle-warning',
  '09-hundred-sessions': 'sessions-panel',
  '12-budget-held': 'budget-held',
  '15-pausing-progress': 'pausing',
  '16-waiting-row': 'waiting',
  '18-gpu-free-notification': 'gpu-free',
  '20b-rebuild-offer': 'rebuild-offer',
  '25-hub-console': 'hub-console'
};

/**
 * Copy `artifacts/<name>.png` into the docs when the docs show it.
 */
export function keepForDocs(name: string): void {
  const doc = DOC_SHOTS[name];
  if (doc) {
    fs.copyFileSync(
      path.join(ARTIFACTS, `${name}.png`),
      path.join(DOCS_SCREENSHOTS, `${doc}.png`)
    );
  }
}

/**
 * Save a screenshot of the page as `artifacts/<name>.png` (and in the docs, when they show it).
 */
export async function snap(page: Page, name: string): Promise<void> {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`) });
  keepForDocs(name);
}

/**
 * Open the GPU sessions panel through its palette command.
 */
export async function openPanel(
  page: IJupyterLabPageFixture
): Promise<Locator> {
  await page.evaluate(() =>
    (window as any).jupyterapp.commands.execute('jupyter-gpu-pause:open-panel')
  );
  const panel = page.locator('#jupyter-gpu-pause-panel');
  await expect(panel).toBeVisible();
  return panel;
}

/**
 * The panel row of a notebook path.
 */
export function row(page: Page, notebook: string): Locator {
  return page
    .locator('#jupyter-gpu-pause-panel .jp-GpuPause-row')
    .filter({ has: page.locator('.jp-GpuPause-path', { hasText: notebook }) });
}

/**
 * The GPU pause button in the toolbar of the notebook being shown.
 */
export function toolbarButton(page: Page): Locator {
  return page.locator(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-GpuPause-toolbarButton'
  );
}

/**
 * The server's Session JSON of a notebook, by file name (Galata puts each
 * test's files in a folder of its own).
 */
export async function serverSession(
  request: APIRequestContext,
  notebook: string
): Promise<any> {
  const response = await request.get('/gpu-pause/api/sessions');
  expect(response.ok()).toBe(true);
  const body = await response.json();
  return (
    body.sessions.find(
      (s: any) => s.path === notebook || s.path.endsWith(`/${notebook}`)
    ) ?? null
  );
}

/**
 * The text outputs of a cell, joined.
 */
export async function cellOutput(
  page: IJupyterLabPageFixture,
  index: number
): Promise<string> {
  return ((await page.notebook.getCellTextOutput(index)) ?? []).join('').trim();
}

/**
 * Add a code cell at the end of the notebook, run it, and return its index.
 */
export async function appendAndRun(
  page: IJupyterLabPageFixture,
  source: string
): Promise<number> {
  await page.notebook.addCell('code', source);
  const index = (await page.notebook.getCellCount()) - 1;
  await runAndWait(page, index);
  return index;
}

/**
 * Run a cell and wait until it has run. Galata's own wait looks for "Idle"
 * anywhere in the status bar, which our item's "idle 12 s" also matches.
 */
export async function runAndWait(
  page: IJupyterLabPageFixture,
  index: number
): Promise<void> {
  await page.notebook.runCell(index, { wait: false });
  const cell = await page.notebook.getCellLocator(index);
  await expect(cell!.locator('.jp-InputPrompt')).toHaveText(/\[\d+\]:/, {
    timeout: 60 * 1000
  });
}

/**
 * Confirm the plain pause dialog ("Pause kernel?").
 */
export async function confirmPause(page: Page): Promise<void> {
  await page
    .locator('.jp-Dialog')
    .getByRole('button', { name: 'Pause', exact: true })
    .click();
}

/**
 * Pause the shown notebook from its toolbar, confirm, and wait for its
 * panel row to say `paused`.
 */
export async function pauseFromToolbar(
  page: Page,
  notebook: string
): Promise<void> {
  await toolbarButton(page).click();
  await confirmPause(page);
  await expect(row(page, notebook).locator('.jp-GpuPause-badge')).toHaveText(
    'paused',
    { timeout: 60 * 1000 }
  );
}
