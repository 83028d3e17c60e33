/*
 * The gpu-pause admin console: reads the service's JSON API (api/sessions, api/line, api/usage,
 * api/actions) and lets an admin pause a session, cancel a wait, grant or reset a budget.
 *
 * Plain ES2020, no build step and nothing from the network, so the service ships it as a file.
 * Settings come from <body data-prefix data-xsrf>. Every text that comes from the API reaches the
 * page as a text node (never through innerHTML), since notebook names and messages are typed by
 * users.
 */
"use strict";

(() => {
  const body = document.body;
  const PREFIX = withSlash(body.dataset.prefix || "./");
  const XSRF = body.dataset.xsrf || "";

  /** States that hold (or are taking) GPU memory: "running" in the summary and the filter. */
  const RUNNING = new Set(["active", "idle", "suspended", "pausing", "resuming"]);
  const SLOW_MS = 30000; // usage and actions: they change by the hour, not by the second
  const DEFAULT_REFRESH_S = 3;
  const MAX_BACKOFF_MS = 60000;

  const state = {
    sessions: null, // the last api/sessions answer
    line: null,
    usage: null,
    actions: null,
    receivedAt: 0, // Date.now() when the sessions answer arrived
    serverOffsetMs: 0, // the service's clock minus ours, from "generated"
    errors: {}, // source -> message of its last failed request (absent: last one worked)
    pending: new Set(), // keys of sessions or budgets with a POST in flight
    drafts: new Map(), // session key -> message typed in the pause / cancel dialog
    usageSeq: 0,
    health: "",
  };

  // ---- helpers -------------------------------------------------------------------------------

  function withSlash(p) {
    return p.endsWith("/") ? p : p + "/";
  }

  /** Build an element; strings among the children become text nodes, never markup. */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = String(v);
      else if (k === "dataset") {
        for (const [dk, dv] of Object.entries(v)) if (dv !== null && dv !== undefined) el.dataset[dk] = String(dv);
      } else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false || c === "") continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  const $ = (id) => document.getElementById(id);

  /** Decimal units, as the server's units.size_text writes them: "6.1 GB". */
  function sizeText(n) {
    if (n === null || n === undefined || !Number.isFinite(Number(n))) return "–";
    let v = Number(n);
    for (const unit of ["B", "kB", "MB", "GB", "TB"]) {
      if (v < 1000 || unit === "TB") return unit === "B" ? `${Math.round(v)} B` : `${v.toFixed(1)} ${unit}`;
      v /= 1000;
    }
    return `${n} B`;
  }

  /** A coarse duration, as the server's units.age_text: "40 s", "12 min", "2 h", "3 d". */
  function ageText(seconds) {
    const s = Math.max(0, Number(seconds) || 0);
    if (s < 90) return `${Math.round(s)} s`;
    if (s < 90 * 60) return `${Math.round(s / 60)} min`;
    if (s < 48 * 3600) return `${Math.round(s / 3600)} h`;
    return `${Math.round(s / 86400)} d`;
  }

  /** Now on the service's clock, so ages do not depend on this browser's clock being right. */
  function serverNow() {
    return Date.now() + state.serverOffsetMs;
  }

  function secondsSince(iso) {
    const t = Date.parse(iso);
    return Number.isFinite(t) ? (serverNow() - t) / 1000 : null;
  }

  /** "3 min ago" in a <time> whose title is the ISO time. */
  function agoEl(iso, seconds) {
    if (!iso && seconds === undefined) return "–";
    const s = seconds !== undefined && seconds !== null ? seconds : secondsSince(iso);
    const text = s === null ? String(iso) : s < 5 ? "just now" : `${ageText(s)} ago`;
    return h("time", { datetime: iso || null, title: iso || null, text });
  }

  function hoursText(hours) {
    const v = Number(hours) || 0;
    if (v > 0 && v < 0.05) return "<0.1";
    return v.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 });
  }

  function plural(n, noun) {
    return `${n} ${noun}${n === 1 ? "" : "s"}`;
  }

  function sessionKey(s) {
    return `${s.user}/${s.session_id}`;
  }

  // ---- the API -------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message, reason) {
      super(message);
      this.status = status;
      this.reason = reason || null;
    }
  }

  /** One call to the service: JSON in, JSON out, errors as ApiError with the answer's message. */
  async function api(path, init) {
    // JupyterHub accepts the login cookie on a script's request (a GET too) only with the
    // page's XSRF token
    const opts = {
      method: "GET",
      credentials: "same-origin",
      headers: { Accept: "application/json", "X-XSRFToken": XSRF },
    };
    if (init && init.body !== undefined) {
      opts.method = init.method || "POST";
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(init.body);
    }
    let resp;
    try {
      resp = await fetch(PREFIX + path, opts);
    } catch (e) {
      throw new ApiError(0, "the service did not answer (network error); is the Hub up?", "network");
    }
    const text = await resp.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (e) {
      data = null;
    }
    if (!resp.ok) {
      const msg = (data && data.message) || `${resp.status} ${resp.statusText || "error"}`;
      throw new ApiError(resp.status, msg, data && data.reason);
    }
    if (data === null || typeof data !== "object") {
      throw new ApiError(
        resp.status,
        "the answer was not JSON: your login may have expired, reload the page",
        "not-json",
      );
    }
    return data;
  }

  // ---- polling -------------------------------------------------------------------------------

  /**
   * Runs `task` every `interval()` ms while the tab is visible; backs off after failures and
   * never runs two at once (a call while one runs asks for one more right after).
   */
  class Poller {
    constructor(task, interval) {
      this.task = task;
      this.interval = interval;
      this.timer = null;
      this.running = false;
      this.again = false;
      this.failures = 0;
      this.lastRun = 0;
    }

    async now() {
      clearTimeout(this.timer);
      this.timer = null;
      if (this.running) {
        this.again = true;
        return;
      }
      this.running = true;
      this.lastRun = Date.now();
      try {
        const ok = await this.task();
        this.failures = ok === false ? this.failures + 1 : 0;
      } catch (e) {
        this.failures += 1;
        console.error("gpu-pause console:", e);
      } finally {
        this.running = false;
      }
      if (this.again) {
        this.again = false;
        return this.now();
      }
      this.schedule();
    }

    schedule() {
      clearTimeout(this.timer);
      if (document.visibilityState === "hidden") return;
      const base = this.interval();
      const wait = Math.min(base * 2 ** Math.min(this.failures, 5), Math.max(base, MAX_BACKOFF_MS));
      this.timer = setTimeout(() => this.now(), wait);
    }

    stop() {
      clearTimeout(this.timer);
      this.timer = null;
    }
  }

  function refreshMs() {
    const s = Number(state.sessions && state.sessions.refresh_seconds);
    return (Number.isFinite(s) && s > 0 ? Math.min(Math.max(s, 1), 300) : DEFAULT_REFRESH_S) * 1000;
  }

  async function loadLive() {
    const [sessions, line] = await Promise.allSettled([api("api/sessions"), api("api/line")]);
    if (sessions.status === "fulfilled") {
      const data = sessions.value;
      state.sessions = data;
      state.receivedAt = Date.now();
      const gen = Date.parse(data.generated);
      state.serverOffsetMs = Number.isFinite(gen) ? gen - state.receivedAt : 0;
      delete state.errors.sessions;
    } else {
      state.errors.sessions = sessions.reason.message;
    }
    if (line.status === "fulfilled") {
      state.line = line.value;
      delete state.errors.line;
    } else {
      state.errors.line = line.reason.message;
    }
    renderLive();
    return sessions.status === "fulfilled" && line.status === "fulfilled";
  }

  async function loadSlow() {
    const [usage, actions] = await Promise.allSettled([loadUsage(), loadActions()]);
    return usage.status === "fulfilled" && usage.value !== false && actions.status === "fulfilled" && actions.value;
  }

  async function loadUsage() {
    const seq = ++state.usageSeq;
    const { period, by } = usageChoice();
    try {
      const data = await api(`api/usage?${new URLSearchParams({ period, by })}`);
      if (seq !== state.usageSeq) return true; // the admin picked another period meanwhile
      state.usage = data;
      delete state.errors.usage;
    } catch (e) {
      if (seq !== state.usageSeq) return true;
      state.errors.usage = e.message;
      renderStatus();
      return false;
    }
    renderUsage();
    renderStatus();
    return true;
  }

  async function loadActions() {
    try {
      state.actions = await api("api/actions");
      delete state.errors.actions;
    } catch (e) {
      state.errors.actions = e.message;
      renderStatus();
      return false;
    }
    renderActions();
    renderStatus();
    return true;
  }

  const live = new Poller(loadLive, refreshMs);
  const slow = new Poller(loadSlow, () => SLOW_MS);

  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "hidden") {
      live.stop();
      slow.stop();
    } else {
      live.now();
      if (Date.now() - slow.lastRun > SLOW_MS) slow.now();
      else slow.schedule();
    }
    renderStatus();
  });

  /** After an action: everything it may have changed, at once. */
  function refreshAll() {
    live.now();
    slow.now();
  }

  // ---- status line and banner ----------------------------------------------------------------

  const SOURCE_NAMES = { sessions: "sessions", line: "line", usage: "usage", actions: "admin actions" };

  function renderStatus() {
    const updated = $("updated");
    const dot = $("status-dot");
    const hidden = document.visibilityState === "hidden";
    const failed = Object.keys(state.errors);
    const queue = state.sessions && state.sessions.queue;
    const queueDown = queue && queue.available === false;
    let health = "ok";
    if (hidden) health = "paused";
    else if (failed.length || queueDown) health = "error";

    if (!state.receivedAt) updated.textContent = failed.length ? "not loaded" : "loading…";
    else {
      const s = (Date.now() - state.receivedAt) / 1000;
      updated.textContent = `updated ${s < 2 ? "just now" : ageText(s) + " ago"}${hidden ? " · paused while hidden" : ""}`;
      updated.title = new Date(state.receivedAt).toISOString();
    }
    dot.dataset.health = health;

    const banner = $("error-banner");
    if (failed.length || queueDown) {
      const parts = [];
      if (failed.length) {
        $("error-title").textContent = "Could not refresh.";
        for (const src of failed) parts.push(`${SOURCE_NAMES[src] || src}: ${state.errors[src]}.`);
        if (queueDown) parts.push(`The capacity queue is unavailable too: ${queue.error || "no answer"}.`);
        const s = (Date.now() - state.receivedAt) / 1000;
        parts.push(state.receivedAt ? `Showing what was known ${ageText(s)} ago; retrying.` : "Retrying.");
      } else {
        $("error-title").textContent = "Capacity queue unavailable.";
        parts.push(`${queue.where ? `${queue.where}: ` : ""}${queue.error || "no answer"}.`);
        parts.push("Sessions and the line may be out of date; retrying.");
      }
      $("error-text").textContent = parts.join(" ");
      banner.dataset.level = failed.length ? "error" : "warning";
      banner.hidden = false;
    } else {
      banner.hidden = true;
    }

    if (health !== state.health) {
      state.health = health;
      const words = {
        ok: `Live: refreshing every ${refreshMs() / 1000} s.`,
        error: "Refresh failing; showing the last data.",
        paused: "Refresh paused while the tab is hidden.",
      };
      $("status-live").textContent = words[health];
    }
  }

  setInterval(renderStatus, 1000);

  // ---- summary -------------------------------------------------------------------------------

  function renderSummary(list) {
    const count = (pred) => list.filter(pred).length;
    const running = list.filter((s) => RUNNING.has(s.state));
    const idle = list.filter((s) => s.state === "idle");
    const paused = list.filter((s) => s.state === "paused");
    const waiting = list.filter((s) => s.state === "waiting");
    const failed = count((s) => s.state === "failed");
    const memory = running.reduce((a, s) => a + ((s.gpu && Number(s.gpu.memory_bytes)) || 0), 0);
    const nodes = new Set(running.map((s) => s.node).filter(Boolean));

    $("count-running").textContent = String(running.length);
    const active = count((s) => s.state === "active");
    $("note-running").textContent =
      `${active} active · ${idle.length} idle` + (failed ? ` · ${failed} failed` : "");
    $("count-idle").textContent = String(idle.length);
    const longest = Math.max(0, ...idle.map((s) => Number(s.idle_seconds) || 0));
    $("note-idle").textContent = idle.length ? `longest ${ageText(longest)}` : "none idle";
    $("count-paused").textContent = String(paused.length);
    const ckpt = paused.reduce((a, s) => a + ((s.checkpoint && Number(s.checkpoint.bytes)) || 0), 0);
    const stopped = count((s) => s.state === "paused" && s.server_running === false);
    $("note-paused").textContent = paused.length
      ? `${sizeText(ckpt)} in checkpoints` + (stopped ? ` · ${stopped} on stopped servers` : "")
      : "none paused";
    $("count-waiting").textContent = String(waiting.length);
    const waits = ((state.line && state.line.line) || []).map((r) => Number(r.waited_seconds) || 0);
    $("note-waiting").textContent = waits.length ? `longest wait ${ageText(Math.max(...waits))}` : "nobody in line";
    $("memory-held").textContent = sizeText(memory);
    $("note-memory").textContent = `${plural(running.length, "session")} on ${plural(nodes.size, "node")}`;
  }

  // ---- sessions ------------------------------------------------------------------------------

  function rank(s) {
    if (RUNNING.has(s.state)) return 0;
    if (s.state === "waiting") return 1;
    if (s.state === "paused") return 2;
    if (s.state === "failed") return 3;
    return 4;
  }

  function sortSessions(list) {
    return [...list].sort(
      (a, b) =>
        rank(a) - rank(b) ||
        (a.state === "waiting" ? (a.queue_position ?? 1e9) - (b.queue_position ?? 1e9) : 0) ||
        String(a.user).localeCompare(String(b.user)) ||
        String(a.notebook).localeCompare(String(b.notebook)),
    );
  }

  function matches(s, text, wanted) {
    if (wanted === "running" ? !RUNNING.has(s.state) : wanted && s.state !== wanted) return false;
    if (!text) return true;
    return [s.user, s.notebook, s.server, s.node, s.kernel_name].some((v) =>
      String(v || "").toLowerCase().includes(text),
    );
  }

  /** The words after the badge: "42 min", "3 h ago · 1.2 GB", "#2 in line". */
  function stateDetail(s) {
    switch (s.state) {
      case "idle":
        return h("span", { title: s.since ? `idle since ${s.since}` : null, text: ageText(s.idle_seconds) });
      case "paused": {
        const age = s.checkpoint && s.checkpoint.age_seconds != null ? s.checkpoint.age_seconds : s.since ? secondsSince(s.since) : null;
        const parts = [];
        if (age !== null) parts.push(`${ageText(age)} ago`);
        if (s.checkpoint && s.checkpoint.bytes != null) parts.push(sizeText(s.checkpoint.bytes));
        return h("span", { title: s.since || null, text: parts.join(" · ") });
      }
      case "waiting": {
        const pos = s.queue_position != null ? `#${s.queue_position} in line` : "in line";
        const since = (s.waiting && s.waiting.since) || s.since;
        const waited = since ? secondsSince(since) : null;
        return h("span", { title: since || null, text: waited !== null ? `${pos} · ${ageText(waited)}` : pos });
      }
      default:
        return null;
    }
  }

  const BADGE_TEXT = { pausing: "pausing…", resuming: "resuming…" };

  function stateCell(s) {
    const error = s.state === "failed" && s.error ? s.error.message || "failed" : null;
    const detail = stateDetail(s);
    return h(
      "td",
      { title: s.message || null },
      h("span", { class: "gp-badge", dataset: { state: s.state, testid: "state" }, text: BADGE_TEXT[s.state] || s.state }),
      detail ? h("span", { class: "gp-muted" }, " ", detail) : null,
      error ? h("span", { class: "gp-error-text", text: error }) : null,
      s.state === "waiting" && s.waiting && (s.waiting.message || s.waiting.reason)
        ? h("span", { class: "gp-message", text: s.waiting.message || s.waiting.reason })
        : null,
    );
  }

  function deviceText(d) {
    if (d && typeof d === "object") return String(d.index ?? d.name ?? d.uuid ?? "?");
    return String(d);
  }

  function gpuCell(s) {
    const g = s.gpu;
    if (!g) return h("td", { class: "gp-muted", text: "–" });
    const devices = Array.isArray(g.devices) ? g.devices.map(deviceText) : [];
    const util = g.utilization != null && Number.isFinite(Number(g.utilization)) ? ` · ${Math.round(Number(g.utilization))} %` : "";
    return h(
      "td",
      { class: "gp-nowrap" },
      h("span", { text: devices.length ? `GPU ${devices.join(", ")}` : "GPU" }),
      h("span", { class: "gp-sub", text: `${sizeText(g.memory_bytes)}${util}` }),
    );
  }

  function checkpointCell(s) {
    const c = s.checkpoint;
    if (!c) return h("td", { class: "gp-muted", text: "–" });
    return h(
      "td",
      {},
      h("span", { text: sizeText(c.bytes) }),
      h("span", { class: "gp-sub" }, agoEl(c.created, c.age_seconds != null ? c.age_seconds : undefined)),
    );
  }

  function actionsCell(s) {
    const key = sessionKey(s);
    const acts = Array.isArray(s.actions) ? s.actions : [];
    const busy = state.pending.has(key);
    const cell = h("td", { class: "gp-actions" });
    if (acts.includes("pause")) {
      cell.append(
        h("button", {
          type: "button",
          class: "gp-btn gp-btn-small gp-btn-outline-warning",
          dataset: { testid: "pause", action: "pause", key: `pause:${key}` },
          disabled: busy,
          "aria-label": `Pause ${s.notebook || s.session_id} of ${s.user}`,
          text: busy ? "Pausing…" : "Pause…",
        }),
      );
    }
    if (acts.includes("cancel")) {
      cell.append(
        h("button", {
          type: "button",
          class: "gp-btn gp-btn-small gp-btn-outline-danger",
          dataset: { testid: "cancel", action: "cancel", key: `cancel:${key}` },
          disabled: busy,
          "aria-label": `Cancel the wait of ${s.notebook || s.session_id} of ${s.user}`,
          text: busy ? "Cancelling…" : "Cancel wait",
        }),
      );
    }
    return cell;
  }

  function sessionRow(s) {
    const cls = [s.state === "failed" ? "gp-row-failed" : "", s.stale ? "gp-row-stale" : ""].join(" ").trim();
    return h(
      "tr",
      { class: cls || null, dataset: { testid: "session-row", user: s.user, sessionId: s.session_id, state: s.state } },
      h("th", { scope: "row", class: "gp-strong", text: s.user }),
      h(
        "td",
        {},
        h("span", { class: "gp-nb", title: s.session_id ? `session ${s.session_id}` : null, text: s.notebook || s.session_id || "–" }),
        s.kernel_name ? h("span", { class: "gp-sub", text: s.kernel_name }) : null,
      ),
      h(
        "td",
        {},
        h("span", { text: s.server || "–" }),
        s.server_running === false ? h("span", { class: "gp-tag", dataset: { testid: "server-stopped" }, text: "server stopped" }) : null,
        s.stale
          ? h("span", {
              class: "gp-tag gp-tag-warn",
              title: `no update from its server since ${s.updated || "?"}`,
              text: "stale",
            })
          : null,
        h("span", { class: "gp-sub", text: s.node || "" }),
      ),
      stateCell(s),
      gpuCell(s),
      checkpointCell(s),
      actionsCell(s),
    );
  }

  /** Replace a table body, keeping keyboard focus on the same button across the redraw. */
  function replaceRows(tbody, rows) {
    const active = document.activeElement;
    const key = active && tbody.contains(active) ? active.dataset.key : null;
    tbody.replaceChildren(...rows);
    if (key) {
      const again = [...tbody.querySelectorAll("[data-key]")].find((el) => el.dataset.key === key);
      if (again && !again.disabled) again.focus();
    }
  }

  function renderSessions() {
    if (!state.sessions) return;
    const all = Array.isArray(state.sessions.sessions) ? state.sessions.sessions : [];
    const text = $("session-filter").value.trim().toLowerCase();
    const wanted = $("state-filter").value;
    const shown = sortSessions(all.filter((s) => matches(s, text, wanted)));
    replaceRows($("sessions-body"), shown.map(sessionRow));
    const users = new Set(all.map((s) => s.user));
    $("sessions-count").textContent =
      shown.length === all.length
        ? `${plural(all.length, "session")} · ${plural(users.size, "user")}`
        : `${shown.length} of ${all.length} shown`;
    const empty = $("sessions-empty");
    empty.hidden = shown.length > 0;
    empty.textContent = all.length ? "No session matches the filter." : "No GPU sessions right now.";
    renderSummary(all);
  }

  // ---- line ----------------------------------------------------------------------------------

  function renderLine() {
    if (!state.line) return;
    const rows = Array.isArray(state.line.line) ? state.line.line : [];
    replaceRows(
      $("line-body"),
      rows.map((r) =>
        h(
          "tr",
          { dataset: { testid: "line-row", user: r.user, sessionId: r.session_id, position: r.position } },
          h("td", { class: "gp-num gp-strong", text: `#${r.position}` }),
          h("th", { scope: "row", class: "gp-strong", text: r.user }),
          h("td", {}, h("span", { class: "gp-nb", text: r.notebook || r.session_id || "–" })),
          h("td", { text: r.server || "–" }),
          h(
            "td",
            {},
            agoEl(r.since),
            r.waited_seconds != null ? h("span", { class: "gp-sub", text: `waited ${ageText(r.waited_seconds)}` }) : null,
          ),
          h("td", { class: "gp-num", title: r.needs_bytes != null ? `${r.needs_bytes} bytes` : null, text: sizeText(r.needs_bytes) }),
          h(
            "td",
            {},
            h("span", { text: r.reason || "–" }),
            r.message ? h("span", { class: "gp-message", text: r.message }) : null,
          ),
        ),
      ),
    );
    $("line-count").textContent = rows.length ? `${rows.length} waiting` : "";
    $("line-empty").hidden = rows.length > 0;
  }

  function renderLive() {
    renderSessions();
    renderLine();
    renderStatus();
  }

  // ---- usage ---------------------------------------------------------------------------------

  /** The period choices: named ones, then the previous three calendar months (UTC, as the server). */
  function fillPeriods() {
    const select = $("usage-period");
    const options = [
      ["month", "This month"],
      ["week", "This week"],
      ["day", "Today"],
      ["rolling_7d", "Last 7 days"],
      ["rolling_30d", "Last 30 days"],
    ];
    const now = new Date();
    for (let i = 1; i <= 3; i++) {
      const d = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - i, 1));
      const value = `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, "0")}`;
      const label = d.toLocaleString("en-US", { month: "long", year: "numeric", timeZone: "UTC" });
      options.push([value, label]);
    }
    for (const [value, label] of options) select.append(h("option", { value, text: label }));
    const params = new URLSearchParams(location.search);
    const period = params.get("period");
    if (period && options.some(([v]) => v === period)) select.value = period;
    if (params.get("by") === "group") $("usage-by-group").checked = true;
  }

  function usageChoice() {
    const by = document.querySelector('input[name="usage-by"]:checked');
    return { period: $("usage-period").value || "month", by: by ? by.value : "user" };
  }

  function onUsageChoice() {
    const { period, by } = usageChoice();
    const url = new URL(location.href);
    url.searchParams.set("period", period);
    url.searchParams.set("by", by);
    history.replaceState(null, "", url);
    $("usage-csv").href = `${PREFIX}api/usage.csv?${new URLSearchParams({ period, by })}`;
    $("usage-key-h").textContent = by === "group" ? "Group" : "User";
    loadUsage();
  }

  const DATE = { day: "numeric", month: "short", year: "numeric", timeZone: "UTC" };
  const DATETIME = { ...DATE, hour: "2-digit", minute: "2-digit", hour12: false };

  function rangeText(start, end) {
    const a = new Date(start);
    const b = new Date(end);
    if (!Number.isFinite(a.getTime()) || !Number.isFinite(b.getTime())) return "";
    const midnight = (d) => d.getUTCHours() === 0 && d.getUTCMinutes() === 0 && d.getUTCSeconds() === 0;
    if (midnight(a) && midnight(b)) {
      const last = new Date(b.getTime() - 1); // the end is exclusive
      const f = new Intl.DateTimeFormat("en-GB", DATE);
      return f.formatRange ? f.formatRange(a, last) : `${f.format(a)} – ${f.format(last)}`;
    }
    const f = new Intl.DateTimeFormat("en-GB", DATETIME);
    return `${f.format(a)} – ${f.format(b)} UTC`;
  }

  function budgetCell(b) {
    if (!b) return h("td", { class: "gp-muted gp-col-budget", text: "–" });
    const ratio = Math.max(0, Math.min(1, Number(b.ratio) || 0));
    const granted = Number(b.granted_hours) || 0;
    const notes = [];
    if (granted > 0) notes.push(`+${hoursText(granted)} h granted`);
    if (b.state === "held" && b.retry_at) notes.push(`held until ${new Date(b.retry_at).toLocaleString("en-GB", DATETIME)} UTC`);
    if (b.name) notes.unshift(b.name);
    return h(
      "td",
      { class: "gp-col-budget", title: b.text || null },
      h(
        "div",
        { class: "gp-budget" },
        h("span", { class: "gp-bar", dataset: { state: b.state }, "aria-hidden": "true" }, h("span", { style: `width:${(ratio * 100).toFixed(1)}%` })),
        h("span", { class: "gp-num", text: `${hoursText(b.used_hours)} / ${hoursText(b.limit_hours)} h` }),
        h("span", { class: "gp-badge", dataset: { state: b.state, testid: "budget-state" }, text: b.state }),
      ),
      notes.length ? h("span", { class: "gp-sub", text: notes.join(" · ") }) : null,
    );
  }

  function usageRow(r, by) {
    const idle = Number(r.gpu_hours_idle) || 0;
    const reclaimed = Number(r.gpu_hours_reclaimed) || 0;
    const budgetKey = `budget:${r.key}`;
    const busy = state.pending.has(budgetKey);
    const users = Array.isArray(r.users) ? r.users : [];
    const actions = h("td", { class: "gp-actions gp-col-budget" });
    if (by === "user" && r.budget) {
      actions.append(
        h("button", {
          type: "button",
          class: "gp-btn gp-btn-small gp-btn-secondary",
          dataset: { testid: "grant", action: "grant", key: `grant:${r.key}` },
          disabled: busy,
          "aria-label": `Grant GPU-hours to ${r.key}`,
          text: "Grant…",
        }),
        h("button", {
          type: "button",
          class: "gp-btn gp-btn-small gp-btn-outline-danger",
          dataset: { testid: "reset", action: "reset", key: `reset:${r.key}` },
          disabled: busy,
          "aria-label": `Reset the budget of ${r.key}`,
          text: "Reset",
        }),
      );
    }
    return h(
      "tr",
      { dataset: { testid: "usage-row", key: r.key } },
      h(
        "th",
        { scope: "row" },
        h("span", { class: "gp-strong", text: r.key }),
        by === "group" && users.length
          ? h("span", { class: "gp-sub", title: users.join(", "), text: users.length > 4 ? `${users.slice(0, 4).join(", ")} +${users.length - 4}` : users.join(", ") })
          : null,
      ),
      h("td", { class: "gp-num", text: hoursText(r.gpu_hours_held) }),
      h("td", { class: "gp-num", text: hoursText(idle) }),
      h(
        "td",
        { class: "gp-num" },
        hoursText(reclaimed),
        idle > 0 ? h("span", { class: "gp-sub", text: `${Math.round((100 * reclaimed) / idle)} % of idle` }) : null,
      ),
      h("td", { class: "gp-num", text: hoursText(r.gpu_hours_unpausable) }),
      budgetCell(by === "user" ? r.budget : null),
      actions,
    );
  }

  function renderUsage() {
    const u = state.usage;
    if (!u) return;
    const by = u.by === "group" ? "group" : "user";
    const rows = Array.isArray(u.rows) ? u.rows : [];
    $("usage-table").dataset.by = by; // a group has no budget: its columns hide
    replaceRows($("usage-body"), rows.map((r) => usageRow(r, by)));
    const t = u.total || {};
    $("usage-foot").replaceChildren(
      rows.length
        ? h(
            "tr",
            { dataset: { testid: "usage-total" } },
            h("th", { scope: "row", text: `Total (${plural(rows.length, by)})` }),
            h("td", { class: "gp-num", text: hoursText(t.gpu_hours_held) }),
            h("td", { class: "gp-num", text: hoursText(t.gpu_hours_idle) }),
            h("td", { class: "gp-num", text: hoursText(t.gpu_hours_reclaimed) }),
            h("td", { class: "gp-num", text: hoursText(t.gpu_hours_unpausable) }),
            h("td", { class: "gp-col-budget" }),
            h("td", { class: "gp-col-budget" }),
          )
        : "",
    );
    const range = $("usage-range");
    range.textContent = rangeText(u.start, u.end);
    range.title = u.start && u.end ? `${u.start} – ${u.end}` : "";
    $("usage-key-h").textContent = by === "group" ? "Group" : "User";
    $("usage-empty").hidden = rows.length > 0;
  }

  // ---- admin actions -------------------------------------------------------------------------

  const ACTION_WORDS = { pause: "Paused", cancel: "Cancelled wait", grant: "Granted", reset: "Reset budget" };

  function detailText(a) {
    const d = a.detail && typeof a.detail === "object" ? a.detail : {};
    if (a.action === "grant" && d.hours != null) return `+${d.hours} GPU-hours`;
    if ((a.action === "pause" || a.action === "cancel") && d.message) return `“${d.message}”`;
    const parts = Object.entries(d)
      .filter(([k, v]) => k !== "notebook" && v !== null && v !== "" && typeof v !== "object")
      .map(([k, v]) => `${k}: ${v}`);
    return parts.join(", ");
  }

  function renderActions() {
    const list = (state.actions && Array.isArray(state.actions.actions) && state.actions.actions) || [];
    $("actions-body").replaceChildren(
      ...list.map((a) => {
        const d = a.detail && typeof a.detail === "object" ? a.detail : {};
        const what = d.notebook || a.session_id;
        const ok = a.outcome === "ok";
        return h(
          "tr",
          { dataset: { testid: "action-row", action: a.action } },
          h("td", { class: "gp-nowrap" }, agoEl(typeof a.at === "number" ? new Date(a.at * 1000).toISOString() : a.at)),
          h("td", { class: "gp-strong", text: a.by }),
          h("td", { class: "gp-nowrap", text: ACTION_WORDS[a.action] || a.action }),
          h("td", {}, h("span", { text: a.user || "–" }), what ? h("span", { class: "gp-sub gp-nb", text: what }) : null),
          h("td", { class: "gp-muted", text: detailText(a) || "–" }),
          h("td", { class: ok ? "gp-outcome-ok" : "gp-outcome-error", text: ok ? "✓ ok" : a.outcome }),
        );
      }),
    );
    $("actions-empty").hidden = list.length > 0;
  }

  // ---- toasts --------------------------------------------------------------------------------

  function toast(text, level) {
    const box = $("toasts");
    const close = h("button", { type: "button", "aria-label": "Dismiss", text: "×" });
    const el = h("div", { class: "gp-toast", dataset: { level: level || "info", testid: "toast" } }, h("span", { text }), close);
    close.addEventListener("click", () => el.remove());
    box.append(el);
    setTimeout(() => el.remove(), level === "error" ? 15000 : 6000);
  }

  // ---- dialogs -------------------------------------------------------------------------------

  /**
   * Wire one confirm dialog: `submit()` does the POST; on failure the dialog stays open with the
   * answer's message and everything typed in it, so the admin can retry or copy it.
   */
  function dialog(name, { validate, submit, busyText }) {
    const dlg = $(`${name}-dialog`);
    const form = $(`${name}-form`);
    const confirm = $(`${name}-confirm`);
    const error = $(`${name}-error`);
    const idle = confirm.textContent;
    let ctx = null;

    function showError(msg) {
      error.textContent = msg;
      error.hidden = !msg;
    }

    dlg.querySelectorAll("[data-close]").forEach((b) => b.addEventListener("click", () => dlg.close()));
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (!ctx || confirm.disabled) return;
      const bad = validate ? validate(ctx) : null;
      if (bad) {
        showError(bad);
        return;
      }
      const mine = ctx;
      showError("");
      confirm.disabled = true;
      confirm.textContent = busyText;
      state.pending.add(mine.pendingKey);
      rerenderButtons();
      try {
        const okText = await submit(mine);
        if (ctx === mine && dlg.open) dlg.close();
        if (okText) toast(okText, "info");
      } catch (e) {
        const msg = e instanceof ApiError ? e.message : String(e);
        if (ctx === mine && dlg.open) showError(msg);
        else toast(`${mine.what}: ${msg}`, "error");
      } finally {
        state.pending.delete(mine.pendingKey);
        confirm.disabled = false;
        confirm.textContent = idle;
        rerenderButtons();
        refreshAll();
      }
    });

    return {
      open(c, fill) {
        ctx = c;
        showError("");
        fill();
        dlg.showModal();
      },
    };
  }

  function rerenderButtons() {
    renderSessions();
    renderUsage();
  }

  function subjectOf(s) {
    return `${s.user} · ${s.notebook || s.session_id}${s.server ? ` on ${s.server}` : ""}`;
  }

  function mergeSession(row) {
    if (!row || !state.sessions || !Array.isArray(state.sessions.sessions)) return;
    const list = state.sessions.sessions;
    const i = list.findIndex((s) => s.user === row.user && s.session_id === row.session_id);
    if (i >= 0) list[i] = { ...list[i], ...row };
  }

  const pauseMessage = $("pause-message");
  const cancelMessage = $("cancel-message");

  const pauseDialog = dialog("pause", {
    busyText: "Pausing…",
    validate: () => (pauseMessage.value.trim() ? null : "Write a message: the user sees it in JupyterLab."),
    async submit(c) {
      const s = c.session;
      const answer = await api(`api/sessions/${encodeURIComponent(s.user)}/${encodeURIComponent(s.session_id)}/pause`, {
        body: { message: pauseMessage.value.trim() },
      });
      state.drafts.delete(`pause:${c.key}`);
      if (c.key === pauseMessage.dataset.key) pauseMessage.value = "";
      mergeSession(answer.session);
      return `Pausing ${s.notebook || s.session_id} of ${s.user}; they will see your message in JupyterLab.`;
    },
  });

  const cancelDialog = dialog("cancel", {
    busyText: "Cancelling…",
    async submit(c) {
      const s = c.session;
      const message = cancelMessage.value.trim();
      const answer = await api(`api/sessions/${encodeURIComponent(s.user)}/${encodeURIComponent(s.session_id)}/cancel`, {
        body: message ? { message } : {},
      });
      state.drafts.delete(`cancel:${c.key}`);
      if (c.key === cancelMessage.dataset.key) cancelMessage.value = "";
      mergeSession(answer.session);
      return `Cancelled the wait of ${s.notebook || s.session_id} of ${s.user}.`;
    },
  });

  const grantHours = $("grant-hours");
  const grantDialog = dialog("grant", {
    busyText: "Granting…",
    validate: () => {
      const v = Number(grantHours.value);
      return grantHours.value !== "" && Number.isFinite(v) && v > 0 ? null : "Give a positive number of GPU-hours.";
    },
    async submit(c) {
      const hours = Number(grantHours.value);
      const answer = await api("api/budget/grant", { body: { user: c.user, hours } });
      grantHours.value = "";
      const text = answer.budget && answer.budget.text ? `: now ${answer.budget.text}` : "";
      return `Granted ${hours} GPU-hours to ${c.user}${text}.`;
    },
  });

  const resetDialog = dialog("reset", {
    busyText: "Resetting…",
    async submit(c) {
      const answer = await api("api/budget/reset", { body: { user: c.user } });
      const text = answer.budget && answer.budget.text ? `: now ${answer.budget.text}` : "";
      return `Reset the budget of ${c.user}${text}.`;
    },
  });

  /** Keep what the admin types per session, so closing or a failure never loses it. */
  for (const [area, kind] of [
    [pauseMessage, "pause"],
    [cancelMessage, "cancel"],
  ]) {
    area.addEventListener("input", () => {
      state.drafts.set(`${kind}:${area.dataset.key}`, area.value);
      if (kind === "pause") updateChars();
    });
  }

  function updateChars() {
    $("pause-chars").textContent = `${pauseMessage.value.length} / 500`;
  }

  function findSession(user, id) {
    const list = (state.sessions && state.sessions.sessions) || [];
    return list.find((s) => s.user === user && s.session_id === id);
  }

  $("sessions-body").addEventListener("click", (ev) => {
    const btn = ev.target.closest("button[data-action]");
    if (!btn) return;
    const row = btn.closest("tr");
    const s = findSession(row.dataset.user, row.dataset.sessionId);
    if (!s) return;
    const key = sessionKey(s);
    const c = { session: s, key, pendingKey: key, what: subjectOf(s) };
    if (btn.dataset.action === "pause") {
      pauseDialog.open(c, () => {
        $("pause-subject").textContent = subjectOf(s);
        pauseMessage.dataset.key = key;
        pauseMessage.value = state.drafts.get(`pause:${key}`) || "";
        updateChars();
      });
    } else if (btn.dataset.action === "cancel") {
      cancelDialog.open(c, () => {
        $("cancel-subject").textContent = subjectOf(s);
        cancelMessage.dataset.key = key;
        cancelMessage.value = state.drafts.get(`cancel:${key}`) || "";
      });
    }
  });

  $("usage-body").addEventListener("click", (ev) => {
    const btn = ev.target.closest("button[data-action]");
    if (!btn) return;
    const row = btn.closest("tr");
    const user = row.dataset.key;
    const r = ((state.usage && state.usage.rows) || []).find((x) => x.key === user);
    const b = r && r.budget;
    const c = { user, pendingKey: `budget:${user}`, what: `budget of ${user}` };
    const subject = b ? `${user} · ${b.text || `${hoursText(b.used_hours)} of ${hoursText(b.limit_hours)} GPU-hours`}` : user;
    if (btn.dataset.action === "grant") {
      grantDialog.open(c, () => {
        $("grant-subject").textContent = subject;
      });
    } else if (btn.dataset.action === "reset") {
      resetDialog.open(c, () => {
        $("reset-subject").textContent = subject;
      });
    }
  });

  // ---- start ---------------------------------------------------------------------------------

  async function loadMe() {
    try {
      const me = await api("api/me");
      const el = $("me");
      el.textContent = me.name;
      el.title = me.admin ? "Signed in as an admin" : `Signed in; access through ${me.granted_by || "a scope"}`;
    } catch (e) {
      /* the status line reports failing requests; the name from the page stays */
    }
  }

  fillPeriods();
  $("usage-period").addEventListener("change", onUsageChoice);
  document.querySelectorAll('input[name="usage-by"]').forEach((r) => r.addEventListener("change", onUsageChoice));
  $("session-filter").addEventListener("input", renderSessions);
  $("state-filter").addEventListener("change", renderSessions);
  const { period, by } = usageChoice();
  $("usage-csv").href = `${PREFIX}api/usage.csv?${new URLSearchParams({ period, by })}`;
  $("usage-key-h").textContent = by === "group" ? "Group" : "User";

  renderStatus();
  loadMe();
  live.now();
  slow.now();
})();
