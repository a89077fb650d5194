// agentcoord dashboard: read-only views over the daemon's JSON API, plus the protected
// writes (import a launch prompt, request a batch stop, answer an open request). No
// framework, nothing loaded from elsewhere.
"use strict";

const CSRF = document.querySelector('meta[name="agentcoord-csrf"]').content;
const REFRESH_MS = Number(document.querySelector('meta[name="agentcoord-refresh-ms"]').content) || 5000;
const state = { tab: "overview", overview: null, batch: null, query: "", timer: null, feed: null, feedTimer: null,
  answering: null };
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

// A fact a record does not have: agent-coord's projections say "UNKNOWN"; the page shows it absent.
function fact(value) {
  return value === undefined || value === null || value === "" || value === "UNKNOWN" ? "—" : esc(value);
}

// The PR cell: a link only when the lane has a pull request (`pr` comes from a PR URL
// alone); an issue number is a target, never shown as a PR.
function prLink(lane) {
  const url = safeUrl(lane.pr_url);
  if (!lane.pr) return "";
  return url ? `<a href="${esc(url)}" target="_blank" rel="noopener noreferrer">#${esc(lane.pr)}</a>` : `#${esc(lane.pr)}`;
}

// How long ago `iso` was, against the overview's own clock (generated_at), e.g. "12 min".
function age(iso) {
  const then = Date.parse(iso);
  const now = Date.parse((state.overview && state.overview.generated_at) || "") || Date.now();
  if (Number.isNaN(then)) return "";
  const s = Math.max(0, Math.round((now - then) / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h` + (s % 3600 >= 60 ? ` ${Math.floor((s % 3600) / 60)} min` : "");
  return `${Math.floor(s / 86400)} d`;
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

const LANE_HEADERS = ["Lane", "Owner", "State", "Holder", "Liveness", "Status", "Phase", "Machine", "Host", "Target", "PR", "QA",
  "Branch", "Thread"];
// lane_state (coord/holders.py) as the State badge says it
const STATE_WORDS = { held: "held", stale_holder: "stale holder", dead_holder: "dead holder", closed: "closed",
  blocked: "blocked", released: "released", not_started: "not started", unknown: "unknown" };

// A dependency of the lane's own batch by its lane name; one of another batch in full.
function laneRef(ref, batchId) {
  return String(ref).startsWith(`${batchId}:`) ? String(ref).slice(batchId.length + 1) : String(ref);
}

// State: what is true of this lane now. A closed lane says its terminal (and raises no
// liveness alarm); a blocked one what it waits on; a held one with an open dependency says so too.
function stateCell(lane) {
  const st = lane.lane_state || "unknown";
  const deps = (lane.blocked_on || []).map((ref) => laneRef(ref, lane.batch_id)).join(", ");
  let words = STATE_WORDS[st] || st;
  if (st === "closed" && lane.status) words = `closed: ${lane.status}`;
  if (st === "blocked" && deps) words = `blocked on ${deps}`;
  const waits = deps && st !== "blocked" && st !== "closed" ? ` <span class="muted">waits on ${esc(deps)}</span>` : "";
  return `<td class="state" title="${esc(lane.detail)}">${badge(words, `state-${st}`)}${waits}</td>`;
}

// Holder: the agent holding the lane's claim, and for how long (absent when nobody does).
function holderCell(lane) {
  if (!lane.holder) return `<td class="holder"></td>`;
  const since = lane.since ? ` <span class="muted since" title="since ${esc(lane.since)}">for ${esc(age(lane.since))}</span>` : "";
  return `<td class="holder">${esc(lane.holder)}${since}</td>`;
}

function laneRow(lane, matched) {
  const st = lane.lane_state || "unknown";
  // the status column adds what the state does not already say (the holder's report)
  const status = st === "closed" || lane.status === (STATE_WORDS[st] || st) ? "" : lane.status;
  return `<tr class="lane${matched ? " match" : ""}" data-lane="${esc(lane.batch_id)}:${esc(lane.name)}" data-pr="${esc(lane.pr)}"` +
    ` data-state="${esc(st)}">` +
    `<td>${esc(lane.name)}${routeChip(lane)}</td><td${lane.pool ? ` title="a pool lane: any agent may take it (claim --next)"` : ""}>` +
    `${esc(lane.owner)}${lane.pool && lane.owner !== "pool" ? ` <span class="muted">(pool)</span>` : ""}</td>` +
    stateCell(lane) + holderCell(lane) + `<td class="liveness">${badge(lane.liveness)}</td>` +
    `<td class="status">${esc(status)}</td><td>${esc(lane.phase)}</td><td>${esc(lane.machine)}</td><td>${esc(lane.host)}</td>` +
    `<td class="target">${esc((lane.targets || []).join(", "))}</td><td class="pr">${prLink(lane)}</td>` +
    `<td>${badge(lane.qa, "qa-" + lane.qa)}</td><td>${esc(lane.branch)}</td><td>${esc(lane.thread_handle)}</td></tr>`;
}

// ---- the batch's own records (usage tiles, route chip, Merge auth, Blocker panel,
// completion drawer): an absent record degrades to "—" (the route chip is hidden).

function routeChip(lane) {
  return lane.route ? ` <span class="chip route" title="model/effort">${esc(lane.route)}</span>` : "";
}

// A metric as a tile shows it: unknown (null or "—") stays "—", never 0.
function metric(value, prefix) {
  return value === null || value === undefined || value === "—" ? "—" : `${prefix || ""}${esc(value)}`;
}

function tokensOf(m) {
  if (!m) return "—";
  const known = [m.input_tokens, m.output_tokens].filter((v) => typeof v === "number");
  return known.length ? esc(known.reduce((a, b) => a + b, 0)) : "—";
}

function usageTiles(batch) {
  const usage = batch.usage_totals;
  const total = usage ? usage.batch_totals : null;
  const models = usage ? Object.entries(usage.tokens_by_model || {}).sort(([a], [b]) => a.localeCompare(b)) : [];
  return `<div class="tiles">` +
    `<div class="tile tokens"><span class="muted">Tokens</span><strong>${tokensOf(total)}</strong>` +
    (total ? `<span class="muted">in ${metric(total.input_tokens)} · out ${metric(total.output_tokens)}</span>` : "") + `</div>` +
    `<div class="tile cost"><span class="muted">Cost</span><strong>${total ? metric(total.cost, "$") : "—"}</strong></div>` +
    `<div class="tile models"><span class="muted">Tokens by model</span>` +
    (models.length ? models.map(([name, m]) => `<span class="model" data-model="${esc(name)}">${esc(name)}: ${tokensOf(m)}` +
      ` <span class="muted">(${metric(m.cost, "$")})</span></span>`).join("") : "<strong>—</strong>") + `</div>` +
    `<div class="tile merge-auth"><span class="muted">Merge auth</span><strong>${fact(batch.merge_authority)}</strong></div></div>`;
}

function blockerPanel(batch) {
  const b = batch.blocker;
  if (!b) return "";
  return `<div class="blocker-panel"><strong>Blocked:</strong> ${esc(b.message)}<ul>` +
    (b.decisions || []).map((d) => `<li class="decision">${esc(d)}</li>`).join("") + `</ul>` +
    (b.recommendedReply ? `<p class="recommended">Recommended: ${esc(b.recommendedReply)}</p>` : "") +
    `<p class="muted">Resolve with <code>agentcoordctl batch unblock --batch-id ${esc(batch.batch_id)} --decision …</code></p></div>`;
}

// The completion drawer: the audit chip, the outcomes, the metrics (unknown: —) and the
// final report; a batch without a completion record shows the degrade note.
function completionDrawer(batch) {
  const record = batch.completion;
  if (!record) {
    return batch.status === "completed" ? `<p class="completion-drawer muted">No completion report recorded.</p>` : "";
  }
  const c = record.completion || {};
  const usage = c.usage && typeof c.usage === "object" ? `in ${metric(c.usage.input)} · out ${metric(c.usage.output)}` : metric(c.usage);
  return `<details class="completion-drawer"><summary>Completion · ${badge(record.audit.verdict, "audit-" + record.audit.verdict)}` +
    ` <span class="muted">${esc(record.audit.author)}</span></summary>` +
    table(["Lane", "Refs", "Route", "PR"], (c.outcomes || []).map((o) => `<tr class="outcome"><td>${esc(o.lane)}</td>` +
      `<td>${esc(o.refs)}</td><td>${esc(o.route)}</td><td>${(o.links || []).map((l) => safeUrl(l.href) ?
        `<a href="${esc(safeUrl(l.href))}" target="_blank" rel="noopener">${esc(l.label)}</a>` : esc(l.label)).join(" ")}</td></tr>`)) +
    `<p class="metrics">Usage <span class="m-usage">${usage}</span> · Tokens <span class="m-tokens">${metric(c.tokensTotal)}</span>` +
    ` · Cost <span class="m-cost">${metric(c.cost, "$")}</span> · Duration <span class="m-duration">${metric(c.duration)}${typeof c.duration === "number" ? "s" : ""}</span></p>` +
    `<p class="final-report">${esc(record.finalReport)}</p></details>`;
}

function laneMatches(lane, query) {
  const q = query.trim().toLowerCase().replace(/^#/, "");
  if (!q) return true;
  if (/^\d+$/.test(q)) {
    return String(lane.pr || "") === q || (lane.targets || []).includes(q);
  }
  return ["branch", "thread_handle", "name", "owner", "holder", "pr_url"].some((k) => typeof lane[k] === "string" && lane[k].toLowerCase().includes(q));
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
      `<span class="muted">${batch.lanes.length} lanes · ${batch.event_count} events</span>${stopBadge}` +
      (batch.blocker ? badge("blocked", "blocked") : "") + `</div>` +
      usageTiles(batch) + blockerPanel(batch) + table(LANE_HEADERS, rows) + completionDrawer(batch) + `</div>`);
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
  const limits = (data.host_limits || []).filter((l) => l.effective);
  $("summary").textContent = `${data.batches.length} batches · ${lanes} lanes · ${data.claims.length} claims · ${data.heartbeats.length} heartbeats` +
    (limits.length ? ` · host limits: ${limits.map((l) => `${l.quota_host}/${l.scope} on ${l.machine} until ${l.resets_at || "cleared"}`).join("; ")}` : "") +
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
    data.claims.map((c) => `<tr class="claim" data-target="${esc(c.repo)}#${esc(c.target)}"><td>${fact(c.repo)}</td>` +
      `<td>${fact(c.target)}</td><td>${fact(c.agent_id)}</td><td>${fact(c.status)}</td><td>${fact(c.batch_id)}</td>` +
      `<td>${fact(c.machine_id)}</td><td class="branch">${fact(c.branch)}</td><td>${fact(c.expires_at)}</td></tr>`));
  $("heartbeats").innerHTML = table(["Agent", "Status", "Liveness", "Target", "Batch", "Machine", "Host", "Phase", "Updated"],
    data.heartbeats.map((h) => `<tr><td>${fact(h.agent_id)}</td><td>${fact(h.status)}</td><td>${badge(h.liveness)}</td><td>${fact(h.target)}</td>` +
      `<td>${fact(h.batch_id)}</td><td>${fact(h.machine_id)}</td><td>${fact(h.host)}</td><td>${fact(h.phase)}</td><td>${fact(h.updated_at)}</td></tr>`));
}

async function loadOverview() {
  state.overview = await api("/api/overview");
  window.agentcoord.loads += 1;
  renderOverview();
  renderRecords();
}

// ---- batch detail -----------------------------------------------------------

async function openBatch(batchId) {
  if (state.batch !== batchId) {
    closeAnswer();
    $("batch-detail").hidden = true;
    $("batch-empty").hidden = false;
    $("batch-empty").textContent = `Loading ${batchId}…`;
    $("answer-result").textContent = "";
  }
  state.batch = batchId;
  selectTab("batch");
}

// "registered <time> by <machine>": each part only when the manifest has it.
function provenance(batch) {
  const when = batch.registered_at || batch.created_at;
  return [when ? `${batch.registered_at ? "registered" : "created"} ${esc(when)}` : "",
    batch.created_by_machine ? `by ${esc(batch.created_by_machine)}` : ""].filter(Boolean).join(" ");
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
  $("batch-meta").innerHTML = `<p id="batch-origin">${[esc(batch.repo), esc(batch.objective), provenance(batch)].filter(Boolean).join(" · ")}</p>` +
    (stop.stop_requested ? `<p>${badge("stop requested", "stop")} at ${esc(stop.requested_at)} ${esc(stop.message)}` +
      (stop.stopped ? ` · ${badge("stopped", "stop")} at ${esc(stop.stopped_at)}` : "") + `</p>` : "") +
    (data.history.problems.length ? `<p class="error">${data.history.problems.length} malformed history line(s) skipped</p>` : "");
  const requests = data.status.open_requests || [];
  $("batch-requests").innerHTML = renderRequests(requests);
  if (state.answering && !requests.some((r) => r.event_id === state.answering.event_id)) {
    closeAnswer();  // answered meanwhile (elsewhere, or by another tab)
    $("answer-result").textContent = "That request is no longer open.";
  }
  if (state.answering) markAnswering();
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

// Help/escalation requests nobody answered: answered here (POST /api/answer) or with
// `agentcoordctl answer --to-event ID`.
function renderRequests(requests) {
  if (!requests.length) return `<p class="muted">No open requests.</p>`;
  return table(["Event", "Type", "Open for", "Lane", "Agent", "Message", ""],
    requests.map((r) => `<tr class="request" data-event="${esc(r.event_id)}"><td><code>${esc(r.event_id)}</code></td>` +
      `<td>${esc(r.type)}</td><td>${esc(Math.round((r.age_seconds || 0) / 60))} min</td><td>${esc(r.lane)}</td>` +
      `<td>${esc(r.agent_id)}</td><td class="msg">${esc(r.message || r.reason)}</td>` +
      `<td><button class="answer-open" data-answer="${esc(r.event_id)}" data-question="${esc(r.message || r.reason)}">Answer</button></td></tr>`));
}

// The answer form lives outside the requests table, so a refresh never wipes what is typed.
function openAnswer(button) {
  state.answering = { batch: state.batch, event_id: button.dataset.answer };
  $("answer-to").textContent = button.dataset.answer;
  $("answer-question").textContent = button.dataset.question || "";
  $("answer-result").textContent = "";
  delete $("answer-result").dataset.status;
  $("answer-form").hidden = false;
  markAnswering();
  $("answer-message").focus();
}

function closeAnswer() {
  state.answering = null;
  $("answer-form").hidden = true;
  $("answer-form").reset();
  markAnswering();
}

function markAnswering() {
  for (const row of document.querySelectorAll("#batch-requests tr.request")) {
    row.classList.toggle("answering", Boolean(state.answering) && row.dataset.event === state.answering.event_id);
  }
}

async function sendAnswer(event) {
  event.preventDefault();
  const asked = state.answering;
  if (!asked) return;
  const optional = (id) => $(id).value.trim() || null;
  const result = $("answer-result");
  try {
    const answered = await post("/api/answer", { batch_id: asked.batch, to_event: asked.event_id,
      message: $("answer-message").value, decision: optional("answer-decision"), agent_id: optional("answer-agent") });
    closeAnswer();
    result.textContent = `Answered ${asked.event_id}: ${answered.event.type} ${answered.event.event_id}` +
      (answered.warnings.length ? ` (${answered.warnings.join("; ")})` : "");
    result.dataset.status = "answered";
    await loadBatch();
  } catch (err) {
    result.textContent = `Refused: ${err.message}`;
    result.dataset.status = "error";
  }
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

// Until the first overview arrives the page says "Loading…" (it is in the HTML, so even a
// screenshot taken before any script ran shows it); if that fetch fails, why — not a blank page.
function setLoad(phase, err) {
  document.body.dataset.load = phase;
  const box = $("load-state");
  box.hidden = phase === "ready";
  box.classList.toggle("error", phase === "error");
  if (phase === "error") {
    box.textContent = `Could not load the dashboard: ${err.message || err}. ` +
      ($("auto-refresh").checked ? `Retrying every ${Math.round(REFRESH_MS / 1000)} s.` : "Reload the page to retry.");
  }
}

async function refresh() {
  try {
    if (state.tab === "overview" || state.tab === "records" || !state.overview) await loadOverview();
    setLoad("ready");
    if (state.tab === "batch") await loadBatch();
    if (state.tab === "health") await loadHealth();
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    showError(null);
  } catch (err) {
    if (state.overview) showError(err); else setLoad("error", err);
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
  $("batch-requests").addEventListener("click", (event) => {
    const target = event.target.closest("[data-answer]");
    if (target) openAnswer(target);
  });
  $("answer-form").addEventListener("submit", sendAnswer);
  $("answer-cancel").addEventListener("click", closeAnswer);
  $("import-preview").addEventListener("click", () => importPrompt(true));
  $("import-button").addEventListener("click", () => importPrompt(false));
  $("auto-refresh").addEventListener("change", schedule);
  refresh().then(() => api("/api/health").then((d) => { $("health-count").textContent = d.warnings.length ? String(d.warnings.length) : ""; }).catch(() => {}));
  schedule();
});
