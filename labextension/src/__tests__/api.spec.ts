/**
 * Unit tests of the REST client: URLs, bodies, and how errors are parsed.
 *
 * JupyterLab ships ES modules that Jest does not load as is, so the one
 * function the client uses from it, `ServerConnection.makeRequest`, is
 * replaced by a mock answering canned `Response`s.
 */
jest.mock('@jupyterlab/services', () => ({
  ServerConnection: {
    makeSettings: () => ({ baseUrl: 'http://localhost:8888/lab-base/' }),
    makeRequest: jest.fn()
  }
}));

import { ServerConnection } from '@jupyterlab/services';

import {
  BUDGET_EXCEEDED,
  GpuPauseAPI,
  GpuPauseError,
  NETWORK_ERROR,
  SERVER_EXTENSION_MISSING
} from '../api';

const makeRequest = ServerConnection.makeRequest as unknown as jest.Mock;

const SESSION = {
  id: 'a1b2',
  path: 'exp/train.ipynb',
  state: 'pausing'
};

function answer(status: number, body: string, statusText = ''): void {
  makeRequest.mockResolvedValueOnce(
    new Response(body || null, { status, statusText })
  );
}

describe('GpuPauseAPI', () => {
  let api: GpuPauseAPI;

  beforeEach(() => {
    makeRequest.mockReset();
    api = new GpuPauseAPI();
  });

  it('builds API URLs under the base URL, with encoded ids and queries', () => {
    // Given the default settings' base URL
    // Then paths hang under gpu-pause/api/ and empty filters are dropped
    expect(api.url('sessions', { path: 'a b/c.ipynb', kernel_id: '' })).toBe(
      'http://localhost:8888/lab-base/gpu-pause/api/sessions?path=a+b%2Fc.ipynb'
    );
    expect(api.url('sessions')).toBe(
      'http://localhost:8888/lab-base/gpu-pause/api/sessions'
    );
  });

  it('lists sessions filtered by path', async () => {
    // Given a server that tracks one session
    answer(200, JSON.stringify({ sessions: [SESSION] }));
    // When listing the sessions of its path
    const sessions = await api.listSessions({ path: 'exp/train.ipynb' });
    // Then the session comes back and the request was a GET with the filter
    expect(sessions).toEqual([SESSION]);
    const [url, init] = makeRequest.mock.calls[0];
    expect(url).toBe(
      'http://localhost:8888/lab-base/gpu-pause/api/sessions?path=exp%2Ftrain.ipynb'
    );
    expect(init.method).toBe('GET');
  });

  it('posts pause and resume with JSON bodies', async () => {
    answer(202, JSON.stringify(SESSION));
    answer(202, JSON.stringify({ ...SESSION, state: 'waiting' }));
    // When pausing, then resuming on CPU
    await api.pause('a/b');
    const resumed = await api.resume('a/b', { device: 'cpu' });
    // Then each is a POST to the session's action with the expected body
    expect(resumed.state).toBe('waiting');
    const [[pauseUrl, pauseInit], [resumeUrl, resumeInit]] =
      makeRequest.mock.calls;
    expect(pauseUrl).toMatch(/\/gpu-pause\/api\/sessions\/a%2Fb\/pause$/);
    expect(pauseInit).toMatchObject({ method: 'POST', body: '{}' });
    expect(resumeUrl).toMatch(/\/sessions\/a%2Fb\/resume$/);
    expect(JSON.parse(resumeInit.body)).toEqual({ device: 'cpu' });
  });

  it('posts a rebuild, with confirm only when asked', async () => {
    answer(202, JSON.stringify({ ...SESSION, state: 'active' }));
    answer(202, JSON.stringify({ ...SESSION, state: 'active' }));
    await api.rebuild('a1b2');
    await api.rebuild('a1b2', { confirm: true, names: ['h'] });
    const [[url, init], [, confirmed]] = makeRequest.mock.calls;
    expect(url).toMatch(/\/gpu-pause\/api\/sessions\/a1b2\/rebuild$/);
    expect(init).toMatchObject({ method: 'POST', body: '{}' });
    expect(JSON.parse(confirmed.body)).toEqual({ names: ['h'], confirm: true });
  });

  it('gets the capacity with the pause tier in force', async () => {
    // Given a server whose CUDA driver has the checkpoint API
    const tier = {
      name: 'suspend',
      reason: 'the CUDA driver 570.86 has the checkpoint API',
      driver_version: '570.86'
    };
    answer(200, JSON.stringify({ provider: 'nvml', tier }));
    // When the Lab asks for the capacity
    const capacity = await api.capacity();
    // Then it is a GET of capacity, and the tier comes back as sent
    expect(capacity.tier).toEqual(tier);
    const [url, init] = makeRequest.mock.calls[0];
    expect(url).toBe('http://localhost:8888/lab-base/gpu-pause/api/capacity');
    expect(init.method).toBe('GET');
  });

  it("gets the user's GPU-hour budget", async () => {
    // Given a user with a budget
    const budget = { name: 'alice', used_hours: 12.4, state: 'ok' };
    answer(200, JSON.stringify({ admin: false, budgets: [budget] }));
    // When the Lab asks for it
    const budgets = await api.budget();
    // Then it is a GET of budget, and the answer comes back as sent
    expect(budgets).toEqual({ admin: false, budgets: [budget] });
    const [url, init] = makeRequest.mock.calls[0];
    expect(url).toBe('http://localhost:8888/lab-base/gpu-pause/api/budget');
    expect(init.method).toBe('GET');
  });

  it('keeps the other fields of an error: when a refused GPU resume may retry', async () => {
    // Given a GPU resume over the user's budget
    answer(
      409,
      JSON.stringify({
        message: 'GPU-hour budget "alice" is used up.',
        reason: 'budget-exceeded',
        retry_at: '2027-01-01T00:00:00Z',
        budget: 'alice'
      })
    );
    // When resuming, then the error carries its reason and detail
    const error = await api.resume('a1b2').catch(e => e);
    expect(error).toBeInstanceOf(GpuPauseError);
    expect(error.reason).toBe(BUDGET_EXCEEDED);
    expect(error.detail).toEqual({
      retry_at: '2027-01-01T00:00:00Z',
      budget: 'alice'
    });
  });

  it("parses the server's {message, reason} errors", async () => {
    // Given a session in the wrong state
    answer(
      409,
      JSON.stringify({
        message: 'The session is not paused, so it cannot be resumed.',
        reason: 'wrong-state'
      })
    );
    // When resuming it, then the error carries status, message and reason
    const error = await api.resume('a1b2').catch(e => e);
    expect(error).toBeInstanceOf(GpuPauseError);
    expect(error).toMatchObject({
      status: 409,
      reason: 'wrong-state',
      message: 'The session is not paused, so it cannot be resumed.',
      serverExtensionMissing: false
    });
  });

  it('tells a missing server extension from an unknown session', async () => {
    // Given a server without the extension: an HTML 404 for the API root
    answer(404, '<html>404 : Not Found</html>', 'Not Found');
    // Then the error is flagged as a missing extension
    const probe = await api.listSessions().catch(e => e);
    expect(probe.serverExtensionMissing).toBe(true);

    // Given the extension, answering JSON 404 for an unknown id
    answer(404, JSON.stringify({ message: 'No such session.', reason: 'x' }));
    const error = await api.getSession('nope').catch(e => e);
    expect(error.serverExtensionMissing).toBe(false);
    expect(error.message).toBe('No such session.');

    answer(404, '', 'Not Found');
    const missing = await api.listSessions().catch(e => e);
    expect(missing.reason).toBe(SERVER_EXTENSION_MISSING);
  });

  it('reports other failures with the status and network errors as status 0', async () => {
    answer(502, '', 'Bad Gateway');
    await expect(api.checkpoints('a1b2')).rejects.toMatchObject({
      status: 502,
      message: 'The server answered 502 Bad Gateway.'
    });

    makeRequest.mockRejectedValueOnce(new TypeError('Failed to fetch'));
    await expect(api.cancel('a1b2')).rejects.toMatchObject({
      status: 0,
      reason: NETWORK_ERROR
    });
  });

  it('sends keep-alive seconds, the dry run, discards and event cursors', async () => {
    answer(200, JSON.stringify(SESSION));
    answer(
      200,
      JSON.stringify({
        objects: [],
        skipped: [{ name: 'f', reason: 'open file' }]
      })
    );
    answer(204, '');
    answer(200, JSON.stringify({ events: [] }));
    // When keeping a session alive for 90.4 s, checking, discarding, polling events
    await api.keepalive('a1b2', 90.4);
    const check = await api.check('a1b2');
    await api.discard('a1b2');
    await api.events('2026-12-02T10:00:00Z');
    const calls = makeRequest.mock.calls;
    // Then seconds are whole, the dry run is a POST, discard deletes checkpoints
    expect(JSON.parse(calls[0][1].body)).toEqual({ seconds: 90 });
    expect(calls[1][0]).toMatch(/\/sessions\/a1b2\/check$/);
    expect(check.skipped[0].name).toBe('f');
    expect(calls[2][0]).toMatch(/\/sessions\/a1b2\?delete_checkpoints=true$/);
    expect(calls[2][1].method).toBe('DELETE');
    expect(calls[3][0]).toMatch(/\/events\?since=2026-12-02T10%3A00%3A00Z$/);
  });
});
