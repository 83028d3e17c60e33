/**
 * A typed client of the jupyter_gpu_pause REST API.
 */
import { ServerConnection } from '@jupyterlab/services';
import type { TranslationBundle } from '@jupyterlab/translation';

import { untranslated } from './format';
import {
  IBudgets,
  ICapacity,
  ICheckReport,
  ICheckpoint,
  IEvent,
  IPolicy,
  IReport,
  IResumeOptions,
  ISession,
  ISessionQuery
} from './tokens';

/**
 * Path of the API under the server's base URL.
 */
export const API_ROOT = 'gpu-pause/api/';

/**
 * Reason given to the error raised when the server extension does not answer.
 */
export const SERVER_EXTENSION_MISSING = 'server-extension-missing';

/**
 * Reason of the server's 409 when the notebook has a running kernel in which
 * code was run: resuming would overwrite its variables unless told to
 * (`into_kernel`).
 */
export const KERNEL_EXISTS = 'kernel-exists';

/**
 * Reason of the server's 409 when a GPU resume would go over the user's
 * GPU-hour budget; the error's `detail` has `retry_at` (when GPU resumes are
 * allowed again) and `budget` (its name). A resume on the CPU still works.
 */
export const BUDGET_EXCEEDED = 'budget-exceeded';

/**
 * Reason given to the error raised when the server cannot be reached.
 */
export const NETWORK_ERROR = 'network-error';

/**
 * An error answered by the API, or met while calling it.
 *
 * `message` is the server's sentence for the user whenever it sent one, so it
 * can be shown as is.
 */
export class GpuPauseError extends Error {
  /**
   * @param message - a sentence a user understands.
   * @param status - the HTTP status; 0 when the server was not reached.
   * @param reason - the server's error code, when it gave one.
   * @param detail - the other fields of the server's answer, which some
   *   reasons carry (`budget-exceeded`: `retry_at`, `budget`).
   */
  constructor(
    message: string,
    readonly status: number,
    readonly reason?: string,
    readonly detail: Readonly<Record<string, unknown>> = {}
  ) {
    super(message);
    this.name = 'GpuPauseError';
  }

  /**
   * Whether the error means the server extension is not enabled: the API
   * root itself is unknown to the server.
   */
  get serverExtensionMissing(): boolean {
    return this.reason === SERVER_EXTENSION_MISSING;
  }
}

/**
 * Construction options of {@link GpuPauseAPI}.
 */
export interface IGpuPauseAPIOptions {
  /** Connection settings; the page's defaults when omitted. */
  serverSettings?: ServerConnection.ISettings;
  /** Translation of the client's own error messages. */
  trans?: Pick<TranslationBundle, '__'>;
}

/**
 * Client of the REST API under `{baseUrl}gpu-pause/api/`.
 *
 * Every method resolves with the parsed answer or rejects with a
 * {@link GpuPauseError}.
 */
export class GpuPauseAPI {
  constructor(options: IGpuPauseAPIOptions = {}) {
    this.serverSettings =
      options.serverSettings ?? ServerConnection.makeSettings();
    this._trans = options.trans ?? untranslated;
  }

  /**
   * The connection settings in use.
   */
  readonly serverSettings: ServerConnection.ISettings;

  /**
   * Absolute URL of an API path, with an optional query.
   */
  url(path: string, query: Record<string, string | undefined> = {}): string {
    const base = this.serverSettings.baseUrl.replace(/\/?$/, '/');
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(query)) {
      if (value !== undefined && value !== '') {
        params.append(key, value);
      }
    }
    const search = params.toString();
    return `${base}${API_ROOT}${path}${search ? `?${search}` : ''}`;
  }

  /**
   * List tracked sessions, optionally of one path or kernel.
   */
  async listSessions(query: ISessionQuery = {}): Promise<ISession[]> {
    const data = await this._request<{ sessions: ISession[] }>(
      'GET',
      this.url('sessions', { ...query })
    );
    return data.sessions;
  }

  /**
   * Get one session by id.
   */
  getSession(id: string): Promise<ISession> {
    return this._request<ISession>('GET', this._sessionUrl(id));
  }

  /**
   * Ask the server to pause a session; resolves once the pause has started.
   */
  pause(id: string): Promise<ISession> {
    return this._request<ISession>('POST', this._sessionUrl(id, 'pause'), {});
  }

  /**
   * Ask the server to resume a paused session.
   */
  resume(id: string, options: IResumeOptions = {}): Promise<ISession> {
    const body: IResumeOptions = {};
    if (options.checkpoint_id) {
      body.checkpoint_id = options.checkpoint_id;
    }
    if (options.device) {
      body.device = options.device;
    }
    if (options.into_kernel) {
      body.into_kernel = options.into_kernel;
    }
    return this._request<ISession>(
      'POST',
      this._sessionUrl(id, 'resume'),
      body
    );
  }

  /**
   * Re-run the recorded cells that make what the last resume did not bring
   * back: the names of its rebuild plan, or all of them. `confirm` runs it
   * even where the cells would share restored objects (the server first
   * answers a `rebuild_failed` event with `needs-confirm`). Resolves once
   * the rebuild has started; its outcome is an event.
   */
  rebuild(
    id: string,
    options: { names?: string[]; confirm?: boolean } = {}
  ): Promise<ISession> {
    const body: { names?: string[]; confirm?: boolean } = {};
    if (options.names) {
      body.names = options.names;
    }
    if (options.confirm) {
      body.confirm = true;
    }
    return this._request<ISession>(
      'POST',
      this._sessionUrl(id, 'rebuild'),
      body
    );
  }

  /**
   * Cancel a running pause or a queued resume.
   */
  cancel(id: string): Promise<ISession> {
    return this._request<ISession>('POST', this._sessionUrl(id, 'cancel'), {});
  }

  /**
   * Postpone a policy's action on an idle session by `seconds`.
   */
  keepalive(id: string, seconds: number): Promise<ISession> {
    return this._request<ISession>('POST', this._sessionUrl(id, 'keepalive'), {
      seconds: Math.round(seconds)
    });
  }

  /**
   * Dry-run a pause: which objects would be saved and which not.
   */
  check(id: string): Promise<ICheckReport> {
    return this._request<ICheckReport>(
      'POST',
      this._sessionUrl(id, 'check'),
      {}
    );
  }

  /**
   * Forget a session that is not running, and optionally its checkpoints.
   */
  async discard(id: string, deleteCheckpoints = true): Promise<void> {
    const query = { delete_checkpoints: deleteCheckpoints ? 'true' : 'false' };
    await this._request<null>('DELETE', this._sessionUrl(id, undefined, query));
  }

  /**
   * Lifecycle events at or after `since` (ISO 8601), oldest first.
   */
  async events(since?: string): Promise<IEvent[]> {
    const data = await this._request<{ events: IEvent[] }>(
      'GET',
      this.url('events', { since })
    );
    return data.events;
  }

  /**
   * The idle policies in force.
   */
  async policies(): Promise<IPolicy[]> {
    const data = await this._request<{ policies: IPolicy[] }>(
      'GET',
      this.url('policies')
    );
    return data.policies;
  }

  /**
   * The machine's GPU capacity as the server sees it, and the pause tier in
   * force (`tier`, from servers with suspend in place).
   */
  capacity(): Promise<ICapacity> {
    return this._request<ICapacity>('GET', this.url('capacity'));
  }

  /**
   * GPU-hours accounting since `since` (ISO 8601 or a duration like `7d`).
   */
  report(since?: string): Promise<IReport> {
    return this._request<IReport>('GET', this.url('report', { since }));
  }

  /**
   * The GPU-hour budgets that apply: the user's own (none when no budget
   * applies or they are exempt), or every user's for an admin.
   */
  budget(): Promise<IBudgets> {
    return this._request<IBudgets>('GET', this.url('budget'));
  }

  /**
   * List a session's checkpoints, oldest first.
   */
  async checkpoints(id: string): Promise<ICheckpoint[]> {
    const data = await this._request<{ checkpoints: ICheckpoint[] }>(
      'GET',
      this._sessionUrl(id, 'checkpoints')
    );
    return data.checkpoints;
  }

  private _sessionUrl(
    id: string,
    action?: string,
    query: Record<string, string | undefined> = {}
  ): string {
    const path = `sessions/${encodeURIComponent(id)}`;
    return this.url(action ? `${path}/${action}` : path, query);
  }

  private async _request<T>(
    method: string,
    url: string,
    body?: unknown
  ): Promise<T> {
    const init: RequestInit = { method };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers = { 'Content-Type': 'application/json' };
    }
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(
        url,
        init,
        this.serverSettings
      );
    } catch (error) {
      throw new GpuPauseError(
        this._trans.__('The Jupyter server could not be reached: %1', error),
        0,
        NETWORK_ERROR
      );
    }
    const data = Private.parseJSON(await response.text());
    if (response.ok) {
      return data as T;
    }
    throw this._toError(response, data);
  }

  private _toError(response: Response, data: unknown): GpuPauseError {
    if (Private.isApiError(data)) {
      const { message, reason, ...detail } = data;
      return new GpuPauseError(
        message,
        response.status,
        reason ?? undefined,
        detail
      );
    }
    if (response.status === 404) {
      // The server answered, but not from our handlers (no JSON error body):
      // the API root itself is unknown, so the server extension is missing.
      return new GpuPauseError(
        this._trans.__(
          'The jupyter_gpu_pause server extension is not enabled on this server.'
        ),
        404,
        SERVER_EXTENSION_MISSING
      );
    }
    return new GpuPauseError(
      this._trans.__(
        'The server answered %1 %2.',
        response.status,
        response.statusText
      ),
      response.status
    );
  }

  private _trans: Pick<TranslationBundle, '__'>;
}

/**
 * Module-private helpers.
 */
namespace Private {
  /**
   * Parse a response body; `null` when it is empty or not JSON.
   */
  export function parseJSON(text: string): unknown {
    if (!text) {
      return null;
    }
    try {
      return JSON.parse(text);
    } catch {
      return null;
    }
  }

  /**
   * Whether a parsed body is the API's `{message, reason}` error shape.
   */
  export function isApiError(data: unknown): data is {
    message: string;
    reason?: string | null;
    [key: string]: unknown;
  } {
    return (
      typeof data === 'object' &&
      data !== null &&
      typeof (data as { message?: unknown }).message === 'string' &&
      (data as { message: string }).message !== ''
    );
  }
}
