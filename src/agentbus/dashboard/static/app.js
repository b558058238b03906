// The agentbus dashboard page: renders the boards' snapshots and follows them over SSE.
// No framework, no build step: DOM built with textContent only (no HTML from data).
"use strict";

// The token is never kept here: logging in starts a session held in an HttpOnly cookie.
const state = { allowed: false, skew: 0, agents: null };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function pill(text, stateName) {
  return el("span", { class: "pill", "data-state": stateName || text }, text);
}

function cell(label, ...children) {
  return el("td", { "data-label": label }, ...children);
}

function ago(iso) {
  if (!iso) return "–";
  const seconds = (Date.now() + state.skew - Date.parse(iso)) / 1000;
  if (seconds < 1) return "just now";
  if (seconds < 90) return `${Math.round(seconds)} s ago`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
  return `${Math.round(seconds / 3600)} h ago`;
}

function seconds(value) {
  return value === null || value === undefined ? "–" : `${value.toFixed(2)} s`;
}

function notice(message, kind) {
  const box = document.getElementById("notice");
  box.textContent = message;
  box.dataset.kind = kind || "info";
  box.hidden = !message;
}

// ---- agents ----------------------------------------------------------------

function renderAgents(board) {
  state.agents = board;
  state.skew = Date.parse(board.now) - Date.now();
  const root = document.getElementById("services");
  const live = board.services.reduce((n, s) => n + s.live, 0);
  document.getElementById("agents-summary").textContent =
    `${live} live in ${board.services.filter((s) => !s.gone).length} services`;
  if (!board.services.length) {
    root.replaceChildren(el("p", { class: "muted" }, "no agent has beaten yet"));
    return;
  }
  root.replaceChildren(...board.services.map(renderService));
}

function renderService(service) {
  const title = el(
    "h3",
    {},
    service.service,
    service.gone
      ? pill("no live instance", "gone")
      : el("span", { class: "muted" },
          `${service.live} live · ${service.in_flight}/${service.capacity} in flight`),
  );
  // The site column, where the team spans sites (docs/sites.md): any agent here has one.
  const sited = service.agents.some((agent) => agent.site);
  const rows = service.agents.map((agent) =>
    el(
      "tr",
      { "data-agent-id": agent.agent_id, "data-status": agent.status },
      cell("agent", el("strong", {}, agent.agent_id)),
      ...(sited ? [cell("site", el("span", { "data-site": agent.site || "" }, agent.site || "–"))] : []),
      cell("status", pill(agent.status)),
      cell("in flight", el("span", { class: "load" }, `${agent.in_flight}/${agent.capacity}`),
        bar(agent.in_flight / agent.capacity)),
      cell("skills", el("span", { class: "skills" }, agent.skills.join(", ") || "–")),
      cell("version", agent.version || "–"),
      cell("last beat", el("span", { class: "age", "data-at": agent.last_seen }, ago(agent.last_seen))),
    ),
  );
  const table = el(
    "table",
    {},
    el("thead", {}, el("tr", {}, ...["agent", ...(sited ? ["site"] : []), "status", "in flight",
      "skills", "version", "last beat"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows),
  );
  return el("div", { class: service.gone ? "card gone" : "card", "data-service": service.service,
    "data-gone": service.gone ? "true" : "false" }, title, table);
}

function bar(fraction) {
  // Set through the CSSOM: the page's CSP allows no inline style attribute.
  const fill = el("span", {});
  fill.style.width = `${Math.round(100 * Math.min(1, Math.max(0, fraction)))}%`;
  return el("span", { class: "bar" }, fill);
}

function tickAges() {
  for (const node of document.querySelectorAll(".age[data-at]")) {
    node.textContent = ago(node.dataset.at);
  }
  tickUntil(); // questions.js: the time a question has left
}

// ---- plans -----------------------------------------------------------------

function renderPlans(board) {
  const root = document.getElementById("plan-list");
  const running = board.plans.filter((p) => p.state === "running").length;
  document.getElementById("plans-summary").textContent =
    `${running} running, ${board.plans.length - running} recent`;
  if (!board.plans.length) {
    root.replaceChildren(el("p", { class: "muted" }, "no plan seen yet"));
    return;
  }
  root.replaceChildren(...board.plans.map(renderPlan));
}

function renderPlan(plan) {
  const counts = Object.entries(plan.counts).filter(([, n]) => n > 0)
    .map(([name, n]) => `${n} ${name}`).join(" · ");
  const head = el(
    "h3",
    {},
    plan.plan_id,
    plan.aggregate ? pill(plan.aggregate.status) : pill("running"),
    el("span", { class: "muted" }, `${plan.done}/${plan.total} done · ${counts} · leader ${plan.leader}`),
  );
  const parts = [head];
  if (plan.aggregate) {
    const agg = plan.aggregate;
    parts.push(el("p", { class: "muted aggregate" },
      `${agg.status}: wall time ${seconds(agg.wall_time)}, ${agg.attempts} attempts, ` +
      `agents ${agg.agents_used.join(", ") || "–"}`));
  } else if (plan.cancellable) {
    parts.push(el("div", { class: "actions" },
      el("button", {
        class: "danger", "data-action": "cancel", disabled: !state.allowed || plan.cancel_requested,
        onclick: () => cancelPlan(plan.plan_id),
      }, plan.cancel_requested ? "Cancel sent" : "Cancel plan")));
  }
  const rows = plan.subtasks.map((s) =>
    el(
      "tr",
      { "data-subtask-id": s.id, "data-status": s.status, "data-kind": s.kind,
        class: s.parent ? "child" : "" },
      cell("subtask", s.parent ? "↳ " : "", el("strong", {}, s.id)),
      cell("skill", s.skill),
      cell("status", pill(s.status),
        s.status === "running" && s.fraction !== null ? ` ${Math.round(100 * s.fraction)}%` : ""),
      cell("agent", s.agent_id || "–"),
      cell("attempts", s.attempts),
      cell("time", s.duration !== null ? seconds(s.duration)
        : s.started_at ? el("span", { class: "age", "data-at": s.started_at }, ago(s.started_at)) : "–"),
      cell("note", s.error ? `${s.error.code}: ${s.error.message}`
        : [s.status === "pending" && s.depends_on.length ? `after ${s.depends_on.join(", ")}` : null,
          s.items ? itemsNote(s.items) : null,
          s.message, s.chunks ? `${s.chunks} partial results` : null].filter(Boolean).join(" · ")),
    ),
  );
  parts.push(el("table", {},
    el("thead", {}, el("tr", {}, ...["subtask", "skill", "status", "agent", "attempts", "time", "note"]
      .map((h) => el("th", {}, h)))),
    el("tbody", {}, rows)));
  if (plan.artifacts && plan.artifacts.length) parts.push(renderFiles(plan));
  return el("div", { class: "card", "data-plan-id": plan.plan_id, "data-state": plan.state }, parts);
}

// The files a plan's steps returned: each a download through the dashboard (checked there).
function renderFiles(plan) {
  const base = `/api/plans/${encodeURIComponent(plan.plan_id)}/artifacts/`;
  const items = plan.artifacts.map((a) =>
    el("li", { "data-artifact-id": a.id },
      el("a", { href: base + encodeURIComponent(a.id), download: a.name }, a.name),
      el("span", { class: "muted" }, ` ${bytes(a.size)} · ${a.media_type} · from ${a.step}`)));
  const more = plan.artifacts_left_out
    ? el("li", { class: "muted" }, `${plan.artifacts_left_out} more not listed`) : null;
  return el("div", { class: "files" },
    el("h4", {}, `Files (${plan.artifacts.length + (plan.artifacts_left_out || 0)})`),
    el("ul", {}, items, more));
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return i ? `${n.toFixed(1)} ${units[i]}` : `${n} B`;
}

// A mapped step's items: how they stand, and how many of them the rows below list.
function itemsNote(items) {
  const counts = Object.entries(items.counts).map(([name, n]) => `${n} ${name}`).join(", ");
  const shown = items.shown < items.total ? `, ${items.shown} listed` : "";
  return `${items.total} items: ${counts}${shown}`;
}

// ---- schedules -------------------------------------------------------------

function renderSchedules(board) {
  const root = document.getElementById("schedule-list");
  document.getElementById("schedules-summary").textContent =
    `${board.schedules.length} schedules` + (board.ticker ? ` · ticking on ${board.ticker}` : "");
  if (!board.schedules.length) {
    root.replaceChildren(el("p", { class: "muted" }, "no schedule known yet"));
    return;
  }
  const rows = board.schedules.map((s) => el(
    "tr",
    { "data-schedule": s.name, "data-runs": s.runs.length },
    cell("schedule", el("strong", {}, s.name)),
    cell("when", s.when || "–"),
    cell("runs", s.target || "–"),
    cell("missed", s.missed || "–"),
    cell("next tick", s.next_tick || "–"),
    cell("last runs", s.runs.slice(0, 3).map((r) => el("div", { "data-run-id": r.run_id },
      r.run_id, r.error ? ` · ${r.error}` : r.lag !== null && r.lag !== undefined
        ? ` · lag ${latency(r.lag)}` : ""))),
  ));
  root.replaceChildren(el("table", {},
    el("thead", {}, el("tr", {}, ...["schedule", "when", "runs", "missed", "next tick", "last runs"]
      .map((h) => el("th", {}, h)))),
    el("tbody", {}, rows)));
}

// ---- traffic ---------------------------------------------------------------

function latency(value) {
  if (value === null || value === undefined) return "–";
  return value < 1 ? `${Math.round(value * 1000)} ms` : `${value.toFixed(2)} s`;
}

function renderTraffic(board) {
  const root = document.getElementById("traffic-body");
  const minutes = Math.round(board.window / 60);
  if (!board.services.length) {
    root.replaceChildren(el("p", { class: "muted" }, "no traffic seen yet"));
    return;
  }
  const rows = board.services.map((s) => el(
    "tr",
    { "data-traffic-service": s.service, "data-requests": s.requests },
    cell("service", el("strong", {}, s.service)),
    cell("instances", s.instances),
    cell(`req/s (${Math.round(board.rate_window)} s)`, s.rate.toFixed(2)),
    cell(`requests (${minutes} min)`, s.requests),
    cell("errors", s.error_count
      ? Object.entries(s.errors).map(([code, n]) => `${code} ${n}`).join(", ") : "0"),
    cell("p50", latency(s.p50)),
    cell("p99", latency(s.p99)),
  ));
  root.replaceChildren(el("table", {},
    el("thead", {}, el("tr", {}, ...["service", "instances", `req/s (${Math.round(board.rate_window)} s)`,
      `requests (${minutes} min)`, "errors by code", "p50", "p99"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows)));
}

// ---- dead letters ----------------------------------------------------------

const selected = new Set();

function renderDeadLetters(board) {
  const root = document.getElementById("dlq-body");
  const summary = document.getElementById("dlq-summary");
  if (!board.available) {
    summary.textContent = "";
    root.replaceChildren(el("p", { class: "muted" }, "not available on this transport"));
    return;
  }
  summary.textContent = board.count === null ? "" :
    `${board.count} in the queue · ${board.replayed} replayed · ${board.discarded} discarded here`;
  const ids = new Set(board.letters.map((letter) => letter.id));
  for (const id of [...selected]) if (!ids.has(id)) selected.delete(id);
  const parts = [];
  if (board.error) parts.push(el("p", { class: "muted" }, `cannot read the queue: ${board.error}`));
  parts.push(el("div", { class: "actions" },
    el("button", { "data-action": "refresh-dlq", onclick: refreshDeadLetters }, "Refresh"),
    el("button", { "data-action": "replay-selected", disabled: !state.allowed,
      onclick: () => settle("replay", [...selected]) }, "Replay selected"),
    el("button", { class: "danger", "data-action": "discard-selected", disabled: !state.allowed,
      onclick: () => settle("discard", [...selected]) }, "Discard selected")));
  if (!board.letters.length) {
    parts.push(el("p", { class: "muted" }, "the dead-letter queue is empty"));
    root.replaceChildren(...parts);
    return;
  }
  const rows = board.letters.map((letter) => el(
    "tr",
    { "data-letter-id": letter.id },
    cell("pick", el("input", {
      type: "checkbox", "aria-label": `select ${letter.id}`, checked: selected.has(letter.id),
      onchange: (event) => (event.target.checked ? selected.add(letter.id) : selected.delete(letter.id)),
    })),
    cell("reason", pill(letter.reason || "unknown", "failed")),
    cell("routing key", el("code", {}, letter.routing_key || "–")),
    cell("sender", letter.sender_id || "–"),
    cell("when", el("span", { class: "age", "data-at": letter.dead_lettered_at }, ago(letter.dead_lettered_at))),
    cell("envelope", el("details", {},
      el("summary", {}, `${letter.id} · ${letter.size} bytes`),
      el("pre", {}, letter.body + (letter.truncated ? "\n… (cut)" : "")))),
    cell("", el("span", { class: "actions" },
      el("button", { "data-action": "replay", disabled: !state.allowed,
        onclick: () => settle("replay", [letter.id]) }, "Replay"),
      el("button", { class: "danger", "data-action": "discard", disabled: !state.allowed,
        onclick: () => settle("discard", [letter.id]) }, "Discard"))),
  ));
  parts.push(el("table", {},
    el("thead", {}, el("tr", {}, ...["", "reason", "routing key", "sender", "when", "envelope", ""]
      .map((h) => el("th", {}, h)))),
    el("tbody", {}, rows)));
  root.replaceChildren(...parts);
}

async function refreshDeadLetters() {
  const response = await fetch("/api/dead-letters", { cache: "no-store" });
  if (response.status === 401) return toLogin();
  const body = await response.json();
  if (!response.ok) notice(`dead letters: ${body.error}`, "error");
  else render("dead_letters", body, versionOf(response.headers.get("X-Board-Version")));
}

async function settle(how, ids) {
  if (!ids.length) {
    notice("select dead letters first", "error");
    return;
  }
  try {
    const answer = await act(`/api/dead-letters/${how}`, { ids });
    const done = answer[`${how}ed`];
    const failed = Object.entries(answer.failed);
    const why = failed.map(([id, reason]) => `${id} (${reason})`).join(", ");
    notice(`${how}ed ${done.length}` + (failed.length ? `; not: ${why}` : ""),
      failed.length ? "error" : "info");
    for (const id of done) selected.delete(id);
  } catch (error) {
    notice(`${how} refused: ${error.message}`, "error");
  }
}

// ---- actions ---------------------------------------------------------------

// Actions go with the session cookie (same origin); the server checks both.
async function act(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body || {}),
  });
  const answer = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(answer.error || `HTTP ${response.status}`);
  return answer;
}

async function cancelPlan(planId) {
  try {
    await act(`/api/plans/${encodeURIComponent(planId)}/cancel`);
    notice(`cancel sent for plan ${planId}`);
  } catch (error) {
    notice(`cancel refused: ${error.message}`, "error");
  }
}

function setAuth(allowed, actions) {
  state.allowed = allowed;
  const label = document.getElementById("auth-state");
  label.textContent = allowed ? "actions allowed" : "read-only";
  label.dataset.ok = allowed ? "true" : "false";
  document.getElementById("auth").hidden = allowed || !actions;
  document.getElementById("logout").hidden = !allowed;
  refresh();
}

// The header form: the token goes once, by header; the answer sets the session cookie.
async function logIn(event) {
  event.preventDefault();
  const input = document.getElementById("token");
  const response = await fetch("/api/auth", {
    method: "POST",
    headers: { Authorization: `Bearer ${input.value.trim()}` },
  });
  input.value = "";
  if (response.ok) {
    notice("");
    setAuth(true, true);
    return;
  }
  const answer = await response.json().catch(() => ({ error: response.statusText }));
  notice(`token refused: ${answer.error || `HTTP ${response.status}`}`, "error");
  setAuth(false, true);
}

function toLogin() {
  window.location.assign("/login");
  return false;
}

// ---- wiring ----------------------------------------------------------------

const renderers = {
  agents: renderAgents,
  questions: renderQuestions, // questions.js
  plans: renderPlans,
  schedules: renderSchedules,
  traffic: renderTraffic,
  dead_letters: renderDeadLetters,
};
const latest = {};
const versions = {};

// A snapshot older than the one shown is dropped: the first load and the event
// stream race, and the later answer may hold the older board. Versions count from the
// dashboard process's start: they are forgotten whenever the stream (re)opens, as a
// restarted dashboard counts from 0 again.
function versionOf(text) {
  const version = text ? Number(text) : NaN;
  return Number.isNaN(version) ? undefined : version;
}

function render(topic, data, version) {
  if (version !== undefined) {
    if (version < (versions[topic] ?? -1)) return;
    versions[topic] = version;
  }
  latest[topic] = data;
  const renderer = renderers[topic];
  if (renderer) renderer(data);
}

function refresh() {
  for (const [topic, data] of Object.entries(latest)) render(topic, data);
}

// Beyond localhost, reading needs the token: without a session the APIs answer 401
// and the page goes to the login page.
async function load() {
  const response = await fetch("/api/state", { cache: "no-store" });
  if (response.status === 401) return toLogin();
  const body = await response.json();
  for (const topic of Object.keys(renderers)) {
    if (body[topic]) render(topic, body[topic], body.versions?.[topic]);
  }
  setAuth(body.session && body.actions, body.actions);
  return true;
}

function follow() {
  const live = document.getElementById("live");
  const source = new EventSource("/api/events");
  source.onopen = () => {
    for (const topic of Object.keys(versions)) delete versions[topic];
    live.textContent = "live";
    live.dataset.state = "live";
  };
  source.onerror = () => {
    live.textContent = "reconnecting";
    live.dataset.state = "down";
    // Refused (the session ended): the browser gives up; see whether reading needs a login.
    if (source.readyState === EventSource.CLOSED) {
      load().then((ok) => ok && follow()).catch(() => setTimeout(follow, 5000));
    }
  };
  for (const topic of Object.keys(renderers)) {
    source.addEventListener(topic,
      (event) => render(topic, JSON.parse(event.data), versionOf(event.lastEventId)));
  }
}

document.getElementById("auth").addEventListener("submit", logIn);
load().then(
  (ok) => ok && follow(),
  (error) => {
    notice(`could not load the boards: ${error.message}`, "error");
    follow();
  },
);
setInterval(tickAges, 1000);
