/**
 * Playwright configuration for the Galata UI tests.
 *
 * Browsers are never downloaded: the tests drive the system Chromium
 * (override its path with CHROMIUM_PATH). Playwright starts the JupyterLab
 * server itself, on a fixed port, with jupyter_server_test_config.py (no
 * auth, fresh state): the `jupyter` named by JUPYTER, else the project's
 * .venv, else the one on PATH.
 */
const fs = require('fs');
const path = require('path');
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

const PORT = 8891;
const BASE_URL = `http://127.0.0.1:${PORT}`;
const VENV_JUPYTER = path.resolve(__dirname, '../../.venv/bin/jupyter');
const JUPYTER =
  process.env.JUPYTER ||
  (fs.existsSync(VENV_JUPYTER) ? VENV_JUPYTER : 'jupyter');
const CI = !!process.env.CI;

module.exports = {
  ...baseConfig,
  testDir: './tests',
  outputDir: './test-results',
  // The VMs have 2 cores: one Lab, one browser, generous timeouts.
  workers: 1,
  fullyParallel: false,
  retries: CI ? 1 : 0,
  forbidOnly: CI,
  timeout: 120 * 1000,
  expect: { timeout: 20 * 1000 },
  reporter: [
    ['list'],
    ['html', { open: 'never', outputFolder: 'playwright-report' }]
  ],
  use: {
    ...baseConfig.use,
    // Galata's pages and `request` use this URL: 127.0.0.1, not localhost,
    // which may resolve to ::1 while the server listens on IPv4 only.
    baseURL: BASE_URL,
    appPath: '/lab',
    trace: 'retain-on-failure',
    screenshot: 'only-on-failure',
    // Video needs Playwright's own ffmpeg download, which we never fetch.
    video: 'off',
    navigationTimeout: 60 * 1000,
    actionTimeout: 30 * 1000,
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-dev-shm-usage',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
        '--disable-quic'
      ]
    }
  },
  webServer: {
    command: `${JUPYTER} lab --config jupyter_server_test_config.py --ServerApp.port=${PORT}`,
    url: `${BASE_URL}/lab`,
    timeout: 180 * 1000,
    reuseExistingServer: !CI,
    stdout: 'pipe',
    stderr: 'pipe'
  }
};
