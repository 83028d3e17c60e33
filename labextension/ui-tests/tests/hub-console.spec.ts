/**
 * The Hub console on a real JupyterHub (tests/hub_console.py: PostgreSQL, the Hub, the
 * console as a managed service, alice's and bob's servers): an admin sees a user's running
 * GPU notebook and pauses it with a message, and the user's own Lab says who paused it and
 * why. A user without rights is refused the page.
 *
 * This spec runs beside the other specs' Lab server but does not use it: everything here is
 * behind the Hub, reached by people logging in with the Hub's login form.
 */
import { test, expect, type Browser, type Page } from '@playwright/test';
import { spawn, type ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

import { snap } from './helpers';

const ROOT = path.resolve(__dirname, '..', '..', '..');
const PYTHON = process.env.JUPYTER
  ? path.join(path.dirname(process.env.JUPYTER), 'python')
  : path.join(ROOT, '.venv', 'bin', 'python');
const NOTEBOOK = 'train.ipynb';
const MESSAGE = 'GPU maintenance at 18:00, back in an hour';

interface IStage {
  hub: string;
  console: string;
  admin: string;
  nobody: string;
  admin_token: string;
}

let stage: IStage;
let proc: ChildProcess;

test.describe.configure({ mode: 'serial' });

test.beforeAll(async () => {
  test.setTimeout(300 * 1000);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gp-hub-console-'));
  proc = spawn(PYTHON, ['-m', 'tests.hub_console', dir], {
    cwd: ROOT,
    stdio: ['pipe', 'inherit', 'inherit']
  });
  const file = path.join(dir, 'stage.json');
  await expect
    .poll(() => fs.existsSync(file) || proc.exitCode !== null, {
      timeout: 280 * 1000,
      intervals: [500]
    })
    .toBe(true);
  expect(proc.exitCode, 'tests/hub_console.py exited').toBeNull();
  stage = JSON.parse(fs.readFileSync(file, 'utf-8'));
});

test.afterAll(async () => {
  if (!proc || proc.exitCode !== null) {
    return;
  }
  const ended = new Promise(resolve => proc.once('exit', resolve));
  proc.stdin?.end(); // the stage stops the Hub, its servers and PostgreSQL
  await ended;
});

/**
 * A new browser of `user`, logged in with the Hub's login form.
 */
async function login(browser: Browser, user: string): Promise<Page> {
  const context = await browser.newContext({
    viewport: { width: 1440, height: 900 }
  });
  const page = await context.newPage();
  await page.goto(`${stage.hub}/hub/login`);
  await page.locator('input[name="username"]').fill(user);
  await page.locator('input[name="password"]').fill('any');
  await page
    .locator('input[type="submit"], button[type="submit"]')
    .first()
    .click();
  await page.waitForURL(url => !url.pathname.endsWith('/hub/login'));
  return page;
}

/**
 * A notebook in alice's home, written through her server's contents API.
 */
async function writeNotebook(page: Page): Promise<void> {
  const content = {
    cells: [
      {
        cell_type: 'code',
        source: "weights = [0.5] * 1000; step = 1200; print('training')",
        metadata: {},
        outputs: [],
        execution_count: null
      }
    ],
    metadata: {
      kernelspec: {
        name: 'python3',
        display_name: 'Python 3',
        language: 'python'
      }
    },
    nbformat: 4,
    nbformat_minor: 5
  };
  const answer = await page.request.put(
    `${stage.hub}/user/alice/api/contents/${NOTEBOOK}`,
    {
      headers: { Authorization: `token ${stage.admin_token}` },
      data: { type: 'notebook', format: 'json', content }
    }
  );
  expect(answer.status()).toBeLessThan(300);
}

/**
 * A call to a user's server through the Hub, with the Hub's admin-script token.
 */
async function userApi(
  page: Page,
  user: string,
  method: 'GET' | 'POST',
  path: string,
  data?: unknown
): Promise<any> {
  const answer = await page.request.fetch(`${stage.hub}/user/${user}/${path}`, {
    method,
    headers: { Authorization: `token ${stage.admin_token}` },
    data
  });
  expect(
    answer.status(),
    `${method} ${path}: ${await answer.text()}`
  ).toBeLessThan(300);
  return answer.json();
}

/**
 * A GPU session of `user` on a new kernel of `path`; its id.
 */
async function openSession(
  page: Page,
  user: string,
  path: string
): Promise<string> {
  const opened = await userApi(page, user, 'POST', 'api/sessions', {
    path,
    type: 'notebook',
    name: path,
    kernel: { name: 'python3' }
  });
  const found = await userApi(
    page,
    user,
    'GET',
    `gpu-pause/api/sessions?kernel_id=${opened.kernel.id}`
  );
  return found.sessions[0].id;
}

/**
 * Wait until `user`'s session `id` is in one of `states`.
 */
async function reach(
  page: Page,
  user: string,
  id: string,
  states: RegExp
): Promise<void> {
  await expect
    .poll(
      async () =>
        (await userApi(page, user, 'GET', `gpu-pause/api/sessions/${id}`))
          .state,
      {
        timeout: 60 * 1000
      }
    )
    .toMatch(states);
}

test('an admin pauses a session from the console and the user reads why in Lab', async ({
  browser
}) => {
  test.setTimeout(240 * 1000);

  // Given alice working in her notebook in Lab
  const alice = await login(browser, 'alice');
  await writeNotebook(alice);
  await alice.goto(`${stage.hub}/user/alice/lab/tree/${NOTEBOOK}`);
  const cell = alice.locator('.jp-Notebook .jp-Cell').first();
  await expect(cell).toBeVisible({ timeout: 90 * 1000 });
  // the kernel connected (the status bar names it, idle), so a run reaches it
  await expect(alice.locator('#jp-main-statusbar')).toContainText(
    'Python 3 (ipykernel) | Idle',
    { timeout: 90 * 1000 }
  );
  await cell.locator('.jp-InputArea-editor').click();
  await alice.keyboard.press('Shift+Enter');
  await expect(cell.locator('.jp-InputPrompt')).toContainText('[1]');
  await expect(cell.locator('.jp-OutputArea-output')).toContainText('training');

  // and, beside it: bob's notebook paused (his server then stops itself), and a second
  // notebook of alice's waiting for the one GPU her first notebook holds
  const bob = await openSession(alice, 'bob', 'finetune.ipynb');
  await userApi(
    alice,
    'bob',
    'POST',
    `gpu-pause/api/sessions/${bob}/pause`,
    {}
  );
  const second = await openSession(alice, 'alice', 'eval.ipynb');
  await userApi(
    alice,
    'alice',
    'POST',
    `gpu-pause/api/sessions/${second}/pause`,
    {}
  );
  await reach(alice, 'alice', second, /^paused$/);
  await userApi(
    alice,
    'alice',
    'POST',
    `gpu-pause/api/sessions/${second}/resume`,
    {}
  );
  await reach(alice, 'alice', second, /^waiting$/);

  // When the admin opens the console
  const ada = await login(browser, stage.admin);
  await ada.goto(stage.console);
  // Then alice's notebook is listed, running
  const row = ada
    .locator(`[data-testid="session-row"][data-user="alice"]`)
    .filter({ hasText: NOTEBOOK });
  await expect(row).toHaveCount(1, { timeout: 30 * 1000 });
  await expect(row).toHaveAttribute('data-state', /^(active|idle)$/);
  // with the waiting one first in line, and bob's paused on his stopped server
  const waiting = ada.locator(
    `[data-testid="session-row"][data-session-id="${second}"]`
  );
  await expect(waiting).toHaveAttribute('data-state', 'waiting');
  await expect(ada.locator('[data-testid="line-row"]')).toHaveCount(1);
  const paused = ada.locator(
    `[data-testid="session-row"][data-session-id="${bob}"]`
  );
  await expect(paused).toHaveAttribute('data-state', 'paused', {
    timeout: 30 * 1000
  });
  await expect(paused.locator('[data-testid="server-stopped"]')).toHaveCount(
    1,
    {
      timeout: 30 * 1000
    }
  );
  await snap(ada, '25-hub-console');

  // When the admin pauses it with a message
  await row.locator('[data-testid="pause"]').click();
  await ada.locator('[data-testid="pause-message"]').fill(MESSAGE);
  await ada.locator('[data-testid="pause-confirm"]').click();

  // Then the console shows it paused
  await expect(row).toHaveAttribute('data-state', 'paused', {
    timeout: 60 * 1000
  });
  // and alice's Lab says who paused it and why
  const toast = alice
    .locator('.jp-Notification-Toast-warning')
    .filter({ hasText: 'Paused by an admin (ada)' });
  await expect(toast).toHaveCount(1, { timeout: 60 * 1000 });
  await expect(toast).toContainText(MESSAGE);
  await snap(alice, '26-paused-by-admin');

  // And the console's recent actions name the admin
  await expect(ada.locator('body')).toContainText('ada');
  await snap(ada, '27-hub-console-after-pause');
});

test('a user without rights is refused the console', async ({ browser }) => {
  // When a user who is neither a Hub admin nor granted the scope opens the console
  const dave = await login(browser, stage.nobody);
  const answer = await dave.goto(stage.console);
  // Then the Hub refuses the login to the console (the role that opens it holds the access
  // scope; tests/test_hub_console.py covers the console's own 403 to a token)
  expect(answer?.status()).toBe(403);
  await expect(dave.locator('body')).toContainText(
    'You do not have permission to access JupyterHub service gpu-pause'
  );
  await snap(dave, '28-hub-console-refused');
});
