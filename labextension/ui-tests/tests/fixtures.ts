/**
 * Galata's `test` adapted to this extension; every spec imports `test` and
 * `expect` from here.
 *
 * Galata mocks the Jupyter sessions API with the unanchored pattern
 * `/.*\/api\/sessions.../`, which also captures our own REST API under
 * `/gpu-pause/api/sessions` and breaks it (that API answers
 * `{"sessions": [...]}`, not a list). So the mock is turned off
 * (`sessions: null`) and this fixture shuts down, after each test, the
 * sessions the test started.
 */
import { test as base } from '@jupyterlab/galata';
import type { APIRequestContext } from '@playwright/test';

export { expect } from '@jupyterlab/galata';

/**
 * The ids of the server's Jupyter sessions.
 */
async function sessionIds(request: APIRequestContext): Promise<string[]> {
  const response = await request.get('/api/sessions');
  if (!response.ok()) {
    throw new Error(`GET /api/sessions answered ${response.status()}`);
  }
  const sessions: { id: string }[] = await response.json();
  return sessions.map(session => session.id);
}

export const test = base.extend({
  sessions: async ({ request }, use) => {
    const before = new Set(await sessionIds(request));
    await use(null);
    for (const id of await sessionIds(request)) {
      if (!before.has(id)) {
        await request.delete(`/api/sessions/${id}`);
      }
    }
  }
});
