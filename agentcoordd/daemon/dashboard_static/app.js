// agentcoord dashboard: read-only views over the daemon's JSON API, plus the two
// protected writes (import a launch prompt, request a batch stop). No framework,
// nothing loaded from elsewhere.
"use strict";

const CSRF = document.querySelector('meta[name="agentcoord-csrf"]').content;
const REFRESH_MS = Number(document.querySelector('meta[name="agentcoord-refresh-ms"]').content) || 5000;
const state = { tab: "overview", overview: null, batch: null, query: "", timer: null, feed: null, feedTimer: null };
window.agentcoord = { renders: [], lastRenderMs: null, loads: 0, feedEvents: 0, lastFeedEvent: null };

const $ = (id) => document.getElementById(id);

function esc(value) {
  if (value === undefined || value === null) return "";
  return String(value).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function badge(text, cls) {
  return text ? `<span class="badge ${esc(cls || text)}">${esc(text)}</span>` : "";
}

function safeUrl(url) {
  return typeof url === "string" && /^https?:\/\//i.test(url) ? url : null;
}

function prLink(lane) {
  const label = lane.pr ? `#${lane.pr}` : "";
  const url = safeUrl(lane.pr_url);
  return url ? `<a href="${esc(url)}" target="_blank" rel="noopener noreferrer">${esc(label || url)}</a>` : esc(label);
}

function table(headers, rows) {
  return `<table><thead><tr>${headers.map((h) => `<th>${esc(h)}</th>`).join("")}</tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

async function api(path, options) {
  const response = await fetch(path, Object.assign({ cache: "no-store", credentials: "same-origin" }, options || {}));
  let body = null;
  try { body = await response.json(); } catch (e) { body = { error: `HTTP ${response.status}` }; }
  if (!response.ok) throw new Error(body && body.error ? body.error : `HTTP ${response.status}`);
  return body;
}

async function post(path, payload) {
  return api(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Agentcoord-CSRF": CSRF },
    body: JSON.stringify(payload),
  });
}

function showError(err) {
  const box = $("error");
  if (err) { box.textContent = String(err.message || err); box.hidden = false; } else { box.hidden = true; }
}

// ---- overview ---------------------------------------------------------------

const LANE_HEADERS = ["Lane", "Owner", "Machine", "Host", "Phase", "Status", "Liveness", "Blocked on", "PR", "QA", "Branch", "Thread"];

function laneRow(lane, matched) {
  const blocked = (lane.blocked_on || []).join(", ");
  return `<tr class="lane${matched ? " match" : ""}" data-lane="${esc(lane.batch_id)}:${esc(lane.name)}" data-pr="${esc(lane.pr)}">` +
    `<td>${esc(lane.name)}</td><td>${esc(lane.owner)}</td><td>${esc(lane.machine)}</td><td>${esc(lane.host)}</td>` +
    `<td>${esc(lane.phase)}</td><td>${esc(lane.status)}</td><td>${badge(lane.liveness)}</td>` +
    `<td class="${blocked ? "blocked" : ""}">${esc(blocked)}</td><td>${prLink(lane)}</td>` +
    `<td>${badge(lane.qa, "qa-" + lane.qa)}</td><td>${esc(lane.branch)}</td><td>${esc(lane.thread_handle)}</td></tr>`;
}

function laneMatches(lane, query) {
  const q = query.trim().toLowerCase().replace(/^#/, "");
  if (!q) return true;
  if (/^\d+$/.test(q)) {
    return String(lane.pr || "") === q || (lane.targets || []).includes(q);
  }
  return ["branch", "thread_handle", "name", "owner", "pr_url"].some((k) => typeof lane[k] === "string" && lane[k].toLowerCase().includes(q));
}

function renderOverview() {
  const data = state.overview;
  if (!data) return;
  const t0 = performance.now();
  const query = state.query;
  const parts = [];
  let lanes = 0, shown = 0;
  const matches = [];
  for (const batch of data.batches) {
    lanes += batch.lanes.length;
    const rows = [];
    for (const lane of batch.lanes) {
      const hit = laneMatches(lane, query);
      if (!hit) continue;
      if (query) matches.push(lane);
      rows.push(laneRow(lane, Boolean(query)));
    }
    if (query && rows.length === 0) continue;
    shown += rows.length;
    const stop = batch.stop || {};
    const stopBadge = stop.stopped ? badge("stopped", "stop") : stop.stop_requested ? badge("stop requested", "stop") : "";
    parts.push(`<div class="batch" data-batch="${esc(batch.batch_id)}"><div class="head">` +
      `<h2><button class="linkish" data-open-batch="${esc(batch.batch_id)}">${esc(batch.batch_id)}</button></h2>` +
      `<span>${esc(batch.repo)}</span><span class="muted">${esc(batch.objective)}</span>` +
      `<span class="muted">${batch.lanes.length} lanes · ${batch.event_count} events</span>${stopBadge}</div>` +
      table(LANE_HEADERS, rows) + `</div>`);
  }
  $("overview").innerHTML = parts.join("") || `<p class="muted">${query ? "No lane matches." : "No batches."}</p>`;
  const results = $("search-results");
  if (query) {
    results.hidden = false;
    results.innerHTML = `<p><strong>${matches.length}</strong> lane(s) match <code>${esc(query)}</code>: ` +
      matches.slice(0, 20).map((l) => `<span class="match-item" data-lane="${esc(l.batch_id)}:${esc(l.name)}">${esc(l.batch_id)}:${esc(l.name)}</span>`).join(", ") + `</p>`;
  } else {
    results.hidden = true;
    results.innerHTML = "";
  }
  $("summary").textContent = `${data.batches.length} batches · ${lanes} lanes · ${data.claims.length} claims · ${data.heartbeats.length} heartbeats` +
    (data.degraded && data.degraded.length ? ` · degraded: ${data.degraded.join("; ")}` : "");
  const ms = performance.now() - t0;
  window.agentcoord.lastRenderMs = ms;
  window.agentcoord.renders.push({ lanes: lanes, shown: shown, ms: ms });
  document.body.dataset.renderedLanes = String(shown);
}

function renderRecords() {
  const data = state.overview;
  if (!data) return;
  $("claims").innerHTML = table(["Repo", "Target", "Holder", "Status", "Batch", "Machine", "Branch", "Expires"],
    data.claims.map((c) => `<tr><td>${esc(c.repo)}</td><td>${esc(c.target)}</td><td>${esc(c.agent_id)}</td><td>${esc(c.status)}</td>` +
      `<td>${esc(c.batch_id)}</td><td>${esc(c.machine_id)}</td><td>${esc(c.branch)}</td><td>${esc(c.expires_at)}</td></tr>`));
  $("heartbeats").innerHTML = table(["Agent", "Status", "Liveness", "Target", "Batch", "Machine", "Host", "Phase", "Updated"],
    data.heartbeats.map((h) => `<tr><td>${esc(h.agent_id)}</td><td>${esc(h.status)}</td><td>${badge(h.liveness)}</td><td>${esc(h.target)}</td>` +
      `<td>${esc(h.batch_id)}</td><td>${esc(h.machine_id)}</td><td>${esc(h.host)}</td><td>${esc(h.phase)}</td><td>${esc(h.updated_at)}</td></tr>`));
}

async function loadOverview() {
  state.overview = await api("/api/overview");
  window.agentcoord.loads += 1;
  renderOverview();
  renderRecords();
}

// ---- batch detail -----------------------------------------------------------

async function openBatch(batchId) {
  state.batch = batchId;
  selectTab("batch");
}

async function loadBatch() {
  if (!state.batch) return;
  const data = await api(`/api/batch?batch_id=${encodeURIComponent(state.batch)}`);
  $("batch-empty").hidden = true;
  $("batch-detail").hidden = false;
  $("batch-detail").dataset.batch = data.batch_id;
  const batch = (data.status.batches || [])[0] || {};
  const stop = data.stop || {};
  $("batch-title").textContent = data.batch_id;
  $("batch-meta").innerHTML = `<p>${esc(batch.repo)} · ${esc(batch.objective)} · created ${esc(batch.created_at || batch.registered_at)}` +
    ` by ${esc(batch.created_by_machine)}</p>` +
    (stop.stop_requested ? `<p>${badge("stop requested", "stop")} at ${esc(stop.requested_at)} ${esc(stop.message)}` +
      (stop.stopped ? ` · ${badge("stopped", "stop")} at ${esc(stop.stopped_at)}` : "") + `</p>` : "") +
    (data.history.problems.length ? `<p class="error">${data.history.problems.length} malformed history line(s) skipped</p>` : "");
  $("batch-requests").innerHTML = renderRequests(data.status.open_requests || []);
  const overviewBatch = state.overview && state.overview.batches.find((b) => b.batch_id === data.batch_id);
  const lanes = overviewBatch ? overviewBatch.lanes : [];
  $("batch-lanes").innerHTML = table(LANE_HEADERS, lanes.map((l) => laneRow(l, false)));
  followBatch(data.batch_id);
  const events = data.history.events.slice().reverse();
  $("batch-events").innerHTML = table(["At", "Type", "Lane", "Agent", "Target", "Status", "Machine", "Message", "Source"],
    events.map((e) => `<tr class="event" data-type="${esc(e.type)}"><td>${esc(e.at)}</td><td>${esc(e.type)}</td><td>${esc(e.lane)}</td>` +
      `<td>${esc(e.agent_id)}</td><td>${esc(e.target)}</td><td>${esc(e.status)}</td><td>${esc(e.machine_id)}</td>` +
      `<td class="msg">${esc(e.message)}</td><td>${esc(e.source)}</td></tr>`));
}

// Help/escalation requests nobody answered (`agentcoordctl answer --to-event ID`).
function renderRequests(requests) {
  if (!requests.length) return `<p class="muted">No open requests.</p>`;
  return table(["Event", "Type", "Open for", "Lane", "Agent", "Message"],
    requests.map((r) => `<tr class="request" data-event="${esc(r.event_id)}"><td><code>${esc(r.event_id)}</code></td>` +
      `<td>${esc(r.type)}</td><td>${esc(Math.round((r.age_seconds || 0) / 60))} min</td><td>${esc(r.lane)}</td>` +
      `<td>${esc(r.agent_id)}</td><td class="msg">${esc(r.message || r.reason)}</td></tr>`));
}

// The open batch follows the daemon's live feed (server-sent events): each new event
// re-reads the batch view at once, without waiting for auto-refresh or reloading the page.
function followBatch(batchId) {
  if (state.feed && state.feed.batch === batchId) return;
  if (state.feed) state.feed.source.close();
  const source = new EventSource(`/api/feed?batch_id=${encodeURIComponent(batchId)}&from=end`);
  state.feed = { batch: batchId, source };
  source.addEventListener("open", () => { $("live").textContent = "live"; $("live").dataset.state = "live"; });
  source.addEventListener("error", () => { $("live").textContent = "reconnecting"; $("live").dataset.state = "reconnecting"; });
  source.addEventListener("feed", (message) => {
    window.agentcoord.feedEvents += 1;
    window.agentcoord.lastFeedEvent = JSON.parse(message.data);
    clearTimeout(state.feedTimer);
    state.feedTimer = setTimeout(async () => {
      try {
        await loadOverview();
        if (state.tab === "batch" && state.batch === batchId) await loadBatch();
      } catch (err) {
        showError(err);
      }
    }, 100);
  });
}

async function requestStop() {
  if (!state.batch) return;
  const message = $("stop-message").value.trim();
  try {
    const result = await post("/api/stop", { batch_id: state.batch, message: message || null });
    $("stop-result").textContent = `stop requested (${result.event.event_id})`;
    await loadBatch();
  } catch (err) {
    $("stop-result").textContent = `refused: ${err.message}`;
  }
}

// ---- health -----------------------------------------------------------------

async function loadHealth() {
  const data = await api("/api/health");
  $("health-count").textContent = data.warnings.length ? String(data.warnings.length) : "";
  $("health-verdict").innerHTML = `<p>Verdict: <strong id="health-verdict-text">${esc(data.verdict)}</strong> (exit ${esc(data.exit_code)}) · checked ${esc(data.checked_at)}</p>` +
    (data.errors.length ? `<p class="error">${data.errors.map(esc).join("<br>")}</p>` : "") +
    (data.unreadable.length ? `<p class="error">unreadable: ${data.unreadable.map((u) => esc(u.path)).join(", ")}</p>` : "");
  $("health-warnings").innerHTML = data.warnings.length ? table(["Signal", "Batch", "Message"],
    data.warnings.map((w) => `<tr class="warning" data-signal="${esc(w.signal)}"><td>${esc(w.signal)}</td><td>${esc(w.batch_id)}</td><td class="msg">${esc(w.message)}</td></tr>`))
    : `<p class="muted">No telemetry warnings.</p>`;
  $("health-qa").innerHTML = table(["Repo", "PR", "Batch", "QA", "Latest QA event", "At", "Message"],
    data.qa.map((q) => `<tr><td>${esc(q.repo)}</td><td>${esc(q.target)}</td><td>${esc(q.batch_id)}</td><td>${badge(q.qa, "qa-" + q.qa)}</td>` +
      `<td>${esc(q.qa_event)}</td><td>${esc(q.qa_at)}</td><td class="msg">${esc(q.qa_message)}</td></tr>`));
}

// ---- import -----------------------------------------------------------------

async function importPrompt(dryRun) {
  const text = $("import-prompt").value;
  try {
    const result = await post("/api/import", { launch_prompt: text, dry_run: dryRun, replace: $("import-replace").checked });
    $("import-result").textContent = (result.written ? `Saved ${result.path}\n` : "Preview (nothing written)\n") +
      (result.warnings.length ? `Warnings:\n  ${result.warnings.join("\n  ")}\n` : "") +
      JSON.stringify(result.manifest, null, 2);
    $("import-result").dataset.status = result.written ? "written" : "preview";
    if (result.written) await loadOverview();
  } catch (err) {
    $("import-result").textContent = `Refused: ${err.message}`;
    $("import-result").dataset.status = "error";
  }
}

// ---- tabs and refresh ---------------------------------------------------------

function selectTab(tab) {
  state.tab = tab;
  for (const button of document.querySelectorAll("#tabs button")) button.classList.toggle("active", button.dataset.tab === tab);
  for (const section of document.querySelectorAll("section.tab")) section.hidden = section.id !== `tab-${tab}`;
  refresh();
}

async function refresh() {
  try {
    if (state.tab === "overview" || state.tab === "records" || !state.overview) await loadOverview();
    if (state.tab === "batch") await loadBatch();
    if (state.tab === "health") await loadHealth();
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    showError(null);
  } catch (err) {
    showError(err);
  }
}

function schedule() {
  clearInterval(state.timer);
  if ($("auto-refresh").checked) {
    state.timer = setInterval(() => { if (!document.hidden && state.tab !== "import") refresh(); }, REFRESH_MS);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  for (const button of document.querySelectorAll("#tabs button")) button.addEventListener("click", () => selectTab(button.dataset.tab));
  $("search").addEventListener("input", (event) => {
    state.query = event.target.value;
    if (state.tab !== "overview") selectTab("overview"); else renderOverview();
  });
  $("overview").addEventListener("click", (event) => {
    const target = event.target.closest("[data-open-batch]");
    if (target) openBatch(target.dataset.openBatch);
  });
  $("stop-button").addEventListener("click", requestStop);
  $("import-preview").addEventListener("click", () => importPrompt(true));
  $("import-button").addEventListener("click", () => importPrompt(false));
  $("auto-refresh").addEventListener("change", schedule);
  refresh().then(() => api("/api/health").then((d) => { $("health-count").textContent = d.warnings.length ? String(d.warnings.length) : ""; }).catch(() => {}));
  schedule();
});
