/**
 * Galata's `test` adapted to this extension; every spec imports `test` and
 * `expect` from here.
 *
 * Galata mocks the Jupyter sessions API with the unanchored pattern
 * `/.*\/api\/sessions.../`, which also captures our own REST API under
 * `/gpu-pause/api/sessions` and breaks it (that API answers
 * `{"sessions": [...]}`, not a list). So the mock is turned off
 * (`sessions: null`) and this fixture shuts down, after each test, the
 * sessions the test started. It also discards, with their checkpoints, the
 * GPU sessions the test left behind (a resume still waiting in line for a
 * GPU is taken out of the line first): a retry then starts from the same
 * empty panel, instead of finding the first attempt's paused notebook at
 * the same path.
 */
import { test as base } from '@jupyterlab/galata';
import type { APIRequestContext } from '@playwright/test';

export { expect } from '@jupyterlab/galata';

/**
 * GET a JSON document from the server; a failed request fails the test.
 */
async function getJson(request: APIRequestContext, url: string): Promise<any> {
  const response = await request.get(url);
  if (!response.ok()) {
    throw new Error(`GET ${url} answered ${response.status()}`);
  }
  return response.json();
}

/**
 * The ids of the server's Jupyter sessions.
 */
async function sessionIds(request: APIRequestContext): Promise<string[]> {
  const sessions: { id: string }[] = await getJson(request, '/api/sessions');
  return sessions.map(session => session.id);
}

/**
 * The sessions our server extension tracks, with their states.
 */
async function gpuSessions(
  request: APIRequestContext
): Promise<{ id: string; state: string }[]> {
  return (await getJson(request, '/gpu-pause/api/sessions')).sessions;
}

const SETTLING = new Set(['pausing', 'waiting', 'restoring']);

/**
 * Wait (at most 30 s) until none of the given sessions is mid-operation:
 * the server refuses to discard a session while it pauses or restores.
 */
async function settled(
  request: APIRequestContext,
  ids: Set<string>
): Promise<void> {
  for (let i = 0; i < 150; i++) {
    const busy = (await gpuSessions(request)).filter(
      s => ids.has(s.id) && SETTLING.has(s.state)
    );
    if (!busy.length) {
      return;
    }
    await new Promise(resolve => setTimeout(resolve, 200));
  }
}

export const test = base.extend({
  sessions: async ({ request }, use) => {
    const before = new Set(await sessionIds(request));
    const gpuBefore = new Set((await gpuSessions(request)).map(s => s.id));
    await use(null);
    // A resume waiting in line for a GPU never settles by itself, and would
    // take the GPU the shutdowns below free: take it out of the line first
    // (it stays paused).
    for (const s of await gpuSessions(request)) {
      if (!gpuBefore.has(s.id) && s.state === 'waiting') {
        await request.post(`/gpu-pause/api/sessions/${s.id}/cancel`);
      }
    }
    for (const id of await sessionIds(request)) {
      if (!before.has(id)) {
        await request.delete(`/api/sessions/${id}`);
      }
    }
    // With their kernels shut down, what is left of the test's sessions ends
    // paused or failed, which DELETE accepts.
    const left = new Set(
      (await gpuSessions(request))
        .map(s => s.id)
        .filter(id => !gpuBefore.has(id))
    );
    await settled(request, left);
    for (const id of left) {
      await request.delete(
        `/gpu-pause/api/sessions/${id}?delete_checkpoints=true`
      );
    }
  }
});
