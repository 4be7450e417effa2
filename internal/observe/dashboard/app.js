// The mapagg dashboard: polls /api/cluster and /api/jobs once a second, /api/schedules every
// 2 s and /api/charts every 10 s (the worker caches them, so many open pages cost storage
// nothing more) and renders them. Filters, search and older pages come from /api/v1/jobs; the
// selected job's detail from /api/v1/jobs/{id}. Each page has its address: / (everything),
// jobs, jobs/{id}, schedules, workers, epochs. No dependencies.
"use strict";

const $ = (s) => document.querySelector(s);
// Relative URLs resolve against the dashboard's root, whatever address pick() gives the page
// later: a job's page (jobs/{id}) has its <base> from the server, the root page gets one here.
if (!document.querySelector("base")) {
  const b = document.createElement("base");
  b.href = new URL(".", location.href).href;
  document.head.prepend(b);
}
let selected = null;   // the job whose detail and timeline are shown
let pinned = false;    // the user picked it; otherwise the newest job is followed
let cluster = null;    // last /api/cluster
let jobs = [];         // the jobs shown
let sampled = new Map(); // id → the job as /api/jobs sees it (rate, ETA, samples)
let detail = null;     // last /api/v1/jobs/{selected}
let cancelEnabled = false;
let pages = [""];      // cursors of the pages seen (before=), the first being the newest
let nextCursor = "";
let armed = null;      // "action id": the button pressed once, waiting for the confirming click
let schedules = [];    // last /api/schedules
const leadersSeen = new Map(); // epoch → the leader this page showed: a term whose election it did not hear
let schedulesErr = "";
let schedulesAt = 0;
const deleted = new Set(); // jobs deleted from this page: cached lists may still hold them a moment
let token = sessionStorage.getItem("mapagg-api-token") || "";
let logs = { id: null, next: 0, lines: [], at: 0 }; // the selected job's log as read so far
let search = "";       // the search box's id prefix: only jobs starting with it are listed
let who = null;        // /api/v1/whoami of the token: its name, role and the actions it may take
let listedAt = 0, listedURL = ""; // a filtered list is read at most every 5 s (it costs storage reads)
let charts = null, chartsAt = 0; // last /api/charts
let why = { id: null, at: 0, ans: null, err: "" }; // what the selected job waits for (api/v1/jobs/{id}/why)
// view is the page the address names: the parts it shows are those whose data-views name it.
const view = viewFromPath();
const jobViews = ["overview", "jobs", "job"]; // the pages that show a job's detail
const terminal = (st) => st === "succeeded" || st === "failed" || st === "cancelled";

// pick shows job id's detail and gives it its own address, jobs/{id} (the base of a job's page
// is the root, so the same relative URL works from both).
function pick(id, push = true) {
  selected = id; pinned = !!id; detail = null; armed = null;
  if (push) history.pushState({ job: id }, "", id ? "jobs/" + encodeURIComponent(id) : (view === "overview" ? "./" : view === "job" ? "jobs" : view));
  document.title = id ? "mapagg job " + id : "mapagg cluster";
  tick();
}

// viewFromPath is the page of the address: overview, jobs, job, schedules, workers or epochs.
function viewFromPath() {
  const base = new URL(document.baseURI).pathname;
  const rel = location.pathname.startsWith(base) ? location.pathname.slice(base.length) : "";
  if (/^jobs\/[a-z0-9-]{1,64}$/.test(rel)) return "job";
  return ["jobs", "schedules", "workers", "epochs"].includes(rel) ? rel : "overview";
}

// showView shows the parts of the page view and marks its link.
function showView() {
  for (const sec of document.querySelectorAll("[data-views]")) {
    if (sec.id === "job-detail") continue; // shown when a job is picked (renderDetail)
    sec.hidden = !sec.dataset.views.split(" ").includes(view);
  }
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("current", a.dataset.view === (view === "job" ? "jobs" : view));
  document.body.classList.toggle("view-single", view !== "overview");
  if (view !== "overview" && view !== "job") document.title = "mapagg " + view;
}

// jobFromPath is the job of a /jobs/{id} address, or null.
function jobFromPath() {
  const m = location.pathname.match(/\/jobs\/([a-z0-9-]{1,64})$/);
  return m ? m[1] : null;
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k == null ? "" : String(k)));
  return e;
}

function ago(t) {
  const s = Math.max(0, (Date.now() - new Date(t).getTime()) / 1000);
  if (s < 90) return Math.round(s) + " s";
  if (s < 5400) return Math.round(s / 60) + " min";
  return (s / 3600).toFixed(1) + " h";
}
function clock(t) { return new Date(t).toLocaleTimeString(); }
// day is clock with the date when t is not today (a schedule's ticks may be days apart).
function day(t) {
  const d = new Date(t);
  return d.toDateString() === new Date().toDateString() ? d.toLocaleTimeString() : d.toLocaleString();
}
function secs(x) {
  if (x == null) return "–";
  if (x < 90) return x.toFixed(0) + " s";
  return (x / 60).toFixed(1) + " min";
}

async function getJSON(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok && r.status !== 503) throw new Error(path + ": " + r.status);
  return r.json();
}

function filtered() {
  return $("#filter-state").value !== "" || $("#filter-type").value.trim() !== "" || pages.length > 1 || search !== "";
}

function listURL() {
  const q = new URLSearchParams({ limit: "25" });
  if ($("#filter-state").value) q.set("state", $("#filter-state").value);
  if ($("#filter-type").value.trim()) q.set("type", $("#filter-type").value.trim());
  if (search) q.set("prefix", search);
  const before = pages[pages.length - 1];
  if (before) q.set("before", before);
  return "api/v1/jobs?" + q.toString();
}

async function tick() {
  try {
    const [c, j] = await Promise.all([getJSON("api/cluster"), getJSON("api/jobs")]);
    if (Date.now() - schedulesAt >= 2000) {
      schedulesAt = Date.now();
      try {
        const s = await getJSON("api/schedules");
        schedules = s.schedules || [];
        schedulesErr = s.error || "";
      } catch (e) {
        schedulesErr = "Reading schedules failed: " + e.message;
      }
    }
    // The charts and what the picked job waits for are read beside the tick, never holding it up.
    if ((view === "overview" || view === "jobs") && Date.now() - chartsAt >= 10000) {
      chartsAt = Date.now();
      getJSON("api/charts").then((v) => { charts = v; }, (e) => { charts = { error: e.message }; }).finally(() => { if (cluster) drawCharts(); });
    }
    cluster = c;
    cancelEnabled = !!c.cancel_enabled;
    j.jobs = (j.jobs || []).filter((x) => !deleted.has(x.id));
    sampled = new Map(j.jobs.map((x) => [x.id, x]));
    let warn = j.error ? "Some jobs could not be read just now (showing the last list): " + j.error : "";
    if (filtered() && (listURL() !== listedURL || Date.now() - listedAt > 5000)) {
      try {
        listedURL = listURL(); listedAt = Date.now();
        const page = await getJSON(listedURL);
        if (page.error) throw new Error(page.error);
        jobs = (page.jobs || []).filter((x) => !deleted.has(x.id)).map((x) => Object.assign({}, x, sampled.get(x.id) || {}, { state: x.state }));
        nextCursor = page.next ? new URL(page.next, location.href).searchParams.get("before") : "";
      } catch (e) {
        warn = "Listing jobs failed: " + e.message;
      }
    } else if (!filtered()) {
      listedURL = "";
      jobs = j.jobs || [];
      nextCursor = jobs.length >= 50 ? jobs[jobs.length - 1].id : ""; // /api/jobs shows the newest 50
    }
    if (!pinned) {
      const running = jobs.find((x) => x.state === "running");
      selected = running ? running.id : (jobs.length ? jobs[0].id : null);
    }
    if (selected && !jobViews.includes(view)) selected = null; // a page without jobs reads none
    if (selected) {
      // An ended job's detail does not change: read it once.
      if (!detail || detail.id !== selected || !terminal(detail.state)) {
        try {
          const r = await fetch("api/v1/jobs/" + encodeURIComponent(selected), { cache: "no-store" });
          detail = r.status === 404 ? { id: selected, error_reading: "no such job (deleted?)" } : await r.json();
          if (!r.ok && r.status !== 404) detail = { id: selected, error_reading: detail.error || String(r.status) };
        } catch (e) { detail = { id: selected, error_reading: e.message }; }
      }
    } else {
      detail = null;
    }
    if (selected) await readLogs(selected);
    if (selected) readWhy(selected).then((changed) => { if (changed && cluster) renderDetail(); });
    render(warn);
    $("#status").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    if (!(e instanceof TypeError && String(e.message).includes("fetch"))) console.error(e);
    $("#status").textContent = "cannot reach the worker: " + e.message;
  }
}

// may says whether this page may take action: with a token, as its role allows (whoami);
// without, the dashboard's own cancel, retry and delete when --dashboard-cancel is on.
function may(action) {
  if (token) return !!who && (who.may || []).includes(action);
  return cancelEnabled && (action === "cancel" || action === "retry" || action === "delete");
}

// checkToken asks the worker what the token may do; a token it does not know may do nothing.
async function checkToken() {
  who = null;
  if (!token) return;
  try {
    const r = await fetch("api/v1/whoami", { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
    const b = await r.json();
    who = r.ok ? b : { name: "", role: "", may: [], error: b.error || String(r.status) };
  } catch (e) { who = { name: "", role: "", may: [], error: e.message }; }
}

function render(warn) {
  const c = cluster;
  $("#served-by").textContent = c.worker;
  $("#mode").textContent = token ? (who && who.role ? "token " + who.name + " (role " + who.role + (who.may.length ? ": " + who.may.join(", ") : ": read-only") + ")" :
    "the token was refused" + (who && who.error ? ": " + who.error : "")) :
    (cancelEnabled ? "cancel, retry and delete enabled (--dashboard-cancel)" : "read-only (enter an API token for actions)");
  $("#shards-queued").textContent = c.shards_queued == null ? "?" : c.shards_queued;
  $("#jobs-queued").textContent = c.jobs_queued == null ? "?" : c.jobs_queued;
  const l = c.leader;
  $("#leader-id").textContent = l ? l.id : "none";
  $("#leader-epoch").textContent = l ? l.epoch : "–";
  $("#leader-since").textContent = l ? "since " + clock(l.since) + " (" + ago(l.since) + ")" : (c.leader_error || "nobody holds the lease");

  // Workers.
  const wb = $("#workers tbody");
  wb.replaceChildren(...c.members.map((m) => el("tr", { class: m.leader ? "leader-row" : "", "data-id": m.id },
    el("td", {}, m.id),
    el("td", {}, m.leader ? "leader (epoch " + m.epoch + ")" : "follower"),
    el("td", {}, m.in_flight + " / " + m.concurrency),
    el("td", {}, ago(m.started_at)),
    el("td", { class: "muted" }, m.version),
    el("td", { class: "muted" }, (m.job_types || []).join(", ")),
    el("td", { class: (m.problems || []).length ? "state-failed problems" : "muted" },
      (m.problems || []).length ? "not ready: " + m.problems.join("; ") : "–"))));

  // Epoch history: elections heard since this worker started, plus the leases this page has shown.
  const terms = new Map();
  for (const e of c.events) {
    if (e.kind === "elected") terms.set(e.epoch, { epoch: e.epoch, worker: e.worker, at: e.at });
    if ((e.kind === "lost" || e.kind === "stepped_down") && terms.has(e.epoch)) {
      const t = terms.get(e.epoch);
      t.ended = e.kind.replace("_", " ") + " " + clock(e.at); t.endAt = e.at;
    }
  }
  // A worker that started after an election did not hear it: the leaders this page has shown fill in.
  if (l) leadersSeen.set(l.epoch, { epoch: l.epoch, worker: l.id, at: l.since });
  for (const [epoch, t] of leadersSeen) if (!terms.has(epoch)) terms.set(epoch, { ...t });
  // A term that ended without a word (its leader killed, its lease broken) ended when the next
  // one began: every term but the leading one says when it ended.
  const sortedTerms = [...terms.values()].sort((a, b) => b.epoch - a.epoch);
  sortedTerms.forEach((t, i) => {
    if (t.ended || (l && l.epoch === t.epoch)) return;
    const next = sortedTerms[i - 1];
    t.ended = next ? "ended by " + next.worker + "'s election, " + clock(next.at) : "ended (no leader now)";
    if (next) t.endAt = next.at;
  });
  const eb = $("#epochs tbody");
  eb.replaceChildren(...sortedTerms.slice(0, view === "epochs" ? 200 : 12).map((t) => el("tr", { "data-epoch": t.epoch },
    el("td", {}, t.epoch), el("td", {}, t.worker), el("td", {}, day(t.at)),
    el("td", { class: "muted term-end" }, t.ended || (l && l.epoch === t.epoch ? "leading" : "")),
    el("td", { class: "muted" }, t.endAt ? secs((new Date(t.endAt) - new Date(t.at)) / 1000) : (l && l.epoch === t.epoch ? ago(t.at) + " so far" : "–")))));

  // Jobs.
  const jb = $("#jobs tbody");
  const shown = search ? jobs.filter((x) => x.id.startsWith(search)) : jobs;
  // Rows that did not change stay the same nodes, untouched: a row being clicked, or read by a
  // screen reader, is not swapped out under the pointer by a re-render that changed nothing in it.
  const had = new Map([...jb.children].map((r) => [r.dataset.id, r]));
  const rows = shown.map((j) => {
    const sig = JSON.stringify(j) + (j.id === selected ? " selected" : "");
    const r = had.get(j.id);
    if (r && r.sig === sig) return r;
    const n = jobRow(j);
    n.sig = sig;
    return n;
  });
  rows.forEach((r, i) => { if (jb.children[i] !== r) jb.insertBefore(r, jb.children[i] || null); });
  while (jb.children.length > rows.length) jb.lastElementChild.remove();
  $("#jobs-empty").style.display = jobs.length ? "none" : "";
  $("#jobs-warning").hidden = !warn;
  $("#jobs-warning").textContent = warn || "";
  $("#page-newer").disabled = pages.length <= 1;
  $("#page-older").disabled = !nextCursor;
  $("#page-info").textContent = "page " + pages.length;
  renderDetail();
  renderSchedules();
  drawTimeline();
  drawCharts();

  // Dead letters.
  const dead = c.events.filter((e) => e.kind === "dead_lettered").reverse();
  $("#dead tbody").replaceChildren(...dead.slice(0, 50).map((e) => el("tr", {},
    el("td", {}, clock(e.at)), el("td", {}, e.worker), el("td", {}, e.epoch), el("td", {}, e.err || ""))));
  $("#dead-empty").style.display = dead.length ? "none" : "";
}

function jobRow(j) {
  const total = j.shards_total || 0, done = j.shards_done || 0;
  const pct = total ? Math.floor((100 * done) / total) : (j.state === "succeeded" ? 100 : 0);
  const bar = el("div", { class: "bar " + j.state }, el("div", { style: "width:" + pct + "%" }),
    el("span", { class: "pct" }, pct + " % · " + done + " / " + total));
  const why = (j.error || j.unreadable || j.note || "");
  return el("tr", { class: "job" + (j.id === selected ? " selected" : ""), "data-id": j.id, "data-state": j.state,
      onclick: () => pick(j.id) },
    el("td", {}, j.id), el("td", {}, j.type || "?"),
    el("td", { class: "state state-" + j.state, title: why }, j.state + (j.share ? " · " + Math.round(100 * j.share) + " % share" : "") +
      (why ? ": " + (why.length > 60 ? why.slice(0, 59) + "…" : why) : "")),
    el("td", { class: "submitted" }, j.submitted_at ? day(j.submitted_at) : "–"), el("td", { class: "duration" }, duration(j)),
    el("td", {}, bar), el("td", {}, j.rate ? j.rate.toFixed(1) + " /s" : "–"), el("td", {}, secs(j.eta_seconds)),
    el("td", {}, j.duplicates == null ? "–" : j.duplicates));
}

// duration is how long a job took (submitted to finished), or has run so far.
function duration(j) {
  if (j.finished_at && j.submitted_at) return secs((new Date(j.finished_at) - new Date(j.submitted_at)) / 1000);
  if (j.state === "running") return secs((Date.now() - new Date(j.started_at || j.submitted_at)) / 1000) + " so far";
  if (j.state === "queued" || j.state === "waiting") return "waiting " + ago(j.submitted_at);
  return "–";
}

function when(t) { return t ? new Date(t).toLocaleString() + " (" + ago(t) + " ago)" : "–"; }

// readLogs reads the new lines of job id's log (api/v1/jobs/{id}/logs from the last offset),
// every 2 s while the job may still log.
async function readLogs(id) {
  if (logs.id !== id) logs = { id, next: 0, lines: [], at: 0, err: "" };
  if (Date.now() - logs.at < 2000 || (logs.done && detail && terminal(detail.state))) return;
  logs.at = Date.now();
  try {
    const r = await fetch("api/v1/jobs/" + encodeURIComponent(id) + "/logs?offset=" + logs.next, { cache: "no-store" });
    const b = await r.json();
    if (!r.ok) { logs.err = b.error || String(r.status); return; }
    logs.lines = logs.lines.concat(b.lines || []).slice(-500);
    logs.next = b.next; logs.err = "";
    logs.done = detail && terminal(detail.state);
  } catch (e) { logs.err = e.message; }
}

// readWhy asks every 3 s what the selected job waits for, while it has not ended (the worker
// asks the others over NATS for its running tasks).
async function readWhy(id) {
  if (why.id !== id) why = { id, at: 0, ans: null, err: "" };
  if (why.busy || Date.now() - why.at < 3000 || !detail || detail.id !== id || terminal(detail.state)) return false;
  why.at = Date.now(); why.busy = true;
  const w = why;
  try {
    const r = await fetch("api/v1/jobs/" + encodeURIComponent(id) + "/why", { cache: "no-store" });
    const b = await r.json();
    if (!r.ok) { w.err = b.error || String(r.status); return true; }
    w.ans = b; w.err = "";
  } catch (e) { w.err = e.message; } finally { w.busy = false; }
  return true;
}

function logText(ln) {
  const where = [ln.worker, ln.shard != null ? "shard " + ln.shard + (ln.attempt ? " attempt " + ln.attempt : "") : "", ln.source || ""].filter(Boolean).join(" ");
  const attrs = Object.entries(ln.attrs || {}).map(([k, v]) => k + "=" + JSON.stringify(v)).join(" ");
  return clock(ln.at) + " " + ln.level + " [" + where + "] " + ln.msg + (attrs ? " " + attrs : "");
}

function renderDetail() {
  const box = $("#job-detail");
  const d = detail;
  box.hidden = !d || !jobViews.includes(view);
  if (!d) return;
  $("#detail-id").textContent = d.id;
  $("#detail-state").textContent = d.state || "";
  $("#detail-state").className = "state-" + (d.state || "");
  $("#detail-type").textContent = d.type || "–";
  $("#detail-params").textContent = d.params ? JSON.stringify(d.params, null, 2) : "–";
  $("#detail-submitted").textContent = when(d.submitted_at);
  $("#detail-updated").textContent = when(d.updated_at);
  let took = "";
  if (d.finished_at && d.submitted_at) took = " · took " + secs((new Date(d.finished_at) - new Date(d.submitted_at)) / 1000);
  $("#detail-finished").textContent = (d.finished_at ? when(d.finished_at) : "–") + took;
  const total = d.shards_total || 0, done = d.shards_done || 0;
  $("#detail-progress").textContent = (d.phase ? "tasks: " : "map and merge: ") + done + " of " + total + (d.phase ? " (map and reduce)" : " shards") + (total ? " (" + Math.floor((100 * done) / total) + " %)" : "");
  // A keyed job's phase: its map tasks, then one reduce task a partition.
  $("#detail-phase").textContent = d.phase ? (terminal(d.state) && d.state === "succeeded" ? "map and reduce done · " : "") +
    d.phase + ": " + (d.phase_done || 0) + " of " + (d.phase_total || 0) + (d.phase === "map" ? " map tasks" : " partitions reduced") : "– (not a keyed job)";
  $("#detail-epochs").textContent = d.plan_epoch ? "planned in epoch " + d.plan_epoch + ", last checkpoint by epoch " + d.epoch : "not planned yet";
  $("#detail-retries").textContent = (d.duplicates || 0) + " duplicate results dropped" + (d.plan_epoch && d.epoch > d.plan_epoch ? " · resumed by a later leader" : "");
  $("#detail-error").textContent = d.error || d.unreadable || d.error_reading || "–";
  const res = $("#detail-result");
  res.replaceChildren(d.result_url ? el("a", { href: d.result_url.replace(/^\//, ""), id: "detail-result-link" }, "result JSON") : "–");
  // A succeeded keyed job's output records: every partition, as TSV (worker get JOB DIR fetches them as files).
  $("#detail-output").replaceChildren(d.output_url ? el("span", {}, el("a", { href: d.output_url.replace(/^\//, ""), id: "detail-output-link", download: d.id + ".tsv" }, "output records (TSV)"),
    " · ", el("a", { href: d.output_url.replace(/^\//, "") + "?format=jsonl", download: d.id + ".jsonl" }, "JSON lines"),
    el("span", { class: "muted" }, " · or: worker get " + d.id + " DIR")) : "–");
  // The job's events heard since this worker started: planned, resumed by a new leader, dead
  // letters, finished.
  const evs = (cluster.events || []).filter((e) => e.job === d.id);
  $("#detail-events").replaceChildren(...(evs.length ? evs.slice(-30).map((e) => el("li", { class: e.kind === "dead_lettered" ? "error-full" : "" },
    clock(e.at) + " " + e.kind.replace("_", " ") + " by " + e.worker + (e.epoch ? " (epoch " + e.epoch + ")" : "") +
    (e.shard ? ", shard " + e.shard : "") + (e.err ? ": " + e.err : ""))) : [el("li", { class: "muted" }, "none heard by this worker")]));
  // The job and its retries (retry_of links, metadata only), oldest first.
  const atts = d.attempts || [];
  $("#detail-attempts").replaceChildren(...(atts.length > 1 ? atts.map((a) => el("li", { class: a.id === d.id ? "" : "muted" },
    el("a", { href: "jobs/" + a.id, onclick: (e) => { e.preventDefault(); pick(a.id); } }, a.id),
    " " + a.state + (a.finished_at ? " at " + clock(a.finished_at) : "") + (a.error ? ": " + (a.error.length > 80 ? a.error.slice(0, 79) + "…" : a.error) : "") +
    (a.id === d.id ? " (this one)" : ""))) : [el("li", { class: "muted" }, "only this one" + (d.retry_of ? " (retries " + d.retry_of + ")" : ""))]));
  // What it waits for: a predecessor, a worker with its type, the queue, higher priorities, its slowest task.
  const wl = $("#detail-why");
  if (terminal(d.state)) wl.replaceChildren(el("li", { class: "muted" }, "nothing: it ended"));
  else if (why.id === d.id && why.err) wl.replaceChildren(el("li", { class: "muted" }, "cannot tell: " + why.err));
  else if (why.id === d.id && why.ans) wl.replaceChildren(...(why.ans.reasons.length ? why.ans.reasons.map((r) => el("li", { "data-kind": r.kind }, r.text)) :
    [el("li", { class: "muted" }, "nothing known (being planned, or about to end)")]));
  // With tracing on, the job's log lines carry its trace id: where to look in the collector.
  const traced = logs.id === d.id && logs.lines.find((ln) => ln.trace_id);
  $("#detail-trace").textContent = traced ? "trace id " + traced.trace_id : "– (no traced log line: tracing is off, or the job logged nothing)";
  const cp = d.checkpoint;
  $("#detail-checkpoint").textContent = cp ? cp.writes + " written; the last " + size(cp.bytes) + " by epoch " + cp.epoch +
    (cp.updated_at ? " at " + clock(cp.updated_at) : "") + (cp.plan_epoch ? ", planned in epoch " + cp.plan_epoch : "") : "none yet";
  for (const [act, show, label] of [
    ["cancel", d.state === "queued" || d.state === "running" || d.state === "waiting", "cancel job"],
    ["retry", d.state === "failed" || d.state === "cancelled", "retry job"],
    ["delete", terminal(d.state), "delete job"],
  ]) {
    const btn = $("#detail-" + act);
    btn.hidden = !(may(act) && show);
    $("#detail-logs").textContent = logs.id === d.id ? (logs.err ? "log unavailable: " + logs.err :
      (logs.lines.length ? logs.lines.map(logText).join("\n") : "no lines (job code logs with env.Logger())")) : "–";
    btn.textContent = armed === act + " " + d.id ? "click again to " + act + " " + d.id : label;
  }
}

function size(n) {
  if (n == null) return "?";
  if (n < 1024) return n + " B";
  if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
  return (n / (1 << 20)).toFixed(1) + " MiB";
}

// act runs an action on the selected job after a confirming second click: with the token through
// /api/v1, otherwise through the dashboard's same-origin routes (--dashboard-cancel).
async function act(action) {
  const id = selected;
  if (armed !== action + " " + id) { armed = action + " " + id; renderDetail(); return; }
  armed = null;
  const enc = encodeURIComponent(id);
  const opts = { method: "POST", headers: {} };
  let url = "api/jobs/" + enc + "/" + action;
  if (token) {
    opts.headers.Authorization = "Bearer " + token;
    url = "api/v1/jobs/" + enc + (action === "delete" ? "" : "/" + action);
    if (action === "delete") opts.method = "DELETE";
  }
  const r = await fetch(url, opts);
  let body = {};
  try { body = await r.json(); } catch (e) { /* not JSON */ }
  let msg = action + " refused: " + (body.error || r.status);
  if (r.ok) {
    msg = { cancel: "cancel requested for " + id, retry: "retried " + id + " as " + body.id, delete: "deleted " + id }[action];
    if (action === "retry" && body.id) { history.pushState({ job: body.id }, "", "jobs/" + encodeURIComponent(body.id)); selected = body.id; pinned = true; detail = null; }
    if (action === "delete") { deleted.add(id); jobs = jobs.filter((x) => x.id !== id); selected = null; pinned = false; detail = null; listedAt = 0; }
  }
  $("#detail-action").textContent = msg;
  tick();
}

// chainTitle is a schedule's steps with their parameters, one a line (a chain's later steps
// after its first).
function chainTitle(s) {
  return [s.type + " " + JSON.stringify(s.params), ...(s.then || []).map((x) => "then " + x.type + " " + JSON.stringify(x.params))].join("\n");
}

function renderSchedules() {
  $("#schedules-warning").hidden = !schedulesErr;
  $("#schedules-warning").textContent = schedulesErr;
  $("#schedules-empty").style.display = schedules.length ? "none" : "";
  $("#schedules tbody").replaceChildren(...schedules.map((s) => el("tr", { "data-name": s.name },
    el("td", {}, s.name),
    el("td", {}, s.every ? "every " + s.every : s.cron + (s.time_zone ? " (" + s.time_zone + ")" : "")),
    el("td", { class: "muted", title: chainTitle(s) }, [s.type, ...(s.then || []).map((x) => x.type)].join(" → ")),
    el("td", { class: s.paused ? "state-cancelled" : "state-running" }, s.paused ? "paused" : "active · overlap " + s.overlap),
    el("td", {}, s.last_tick ? day(s.last_tick) : "–"),
    el("td", {}, s.last_job ? el("a", { href: "jobs/" + s.last_job, onclick: (e) => { e.preventDefault(); pick(s.last_job); } }, s.last_job) : "–"),
    el("td", {}, s.paused ? "– (paused)" : (s.next_tick ? day(s.next_tick) : "–")),
    el("td", { class: "muted" }, s.fired + " · " + s.skipped + " · " + s.missed),
    el("td", {}, ...(may("schedule") ? [
      el("button", { type: "button", class: "sched-" + (s.paused ? "resume" : "pause"), onclick: () => scheduleAct(s.name, s.paused ? "resume" : "pause") }, s.paused ? "resume" : "pause"),
      " ", el("button", { type: "button", class: "sched-trigger", onclick: () => scheduleAct(s.name, "trigger") }, "run now")] : [])))));
}

// scheduleAct pauses, resumes or triggers a schedule: with the API token only.
async function scheduleAct(name, action) {
  const r = await fetch("api/v1/schedules/" + encodeURIComponent(name) + "/" + action, { method: "POST", headers: { Authorization: "Bearer " + token } });
  let body = {};
  try { body = await r.json(); } catch (e) { /* not JSON */ }
  $("#schedules-action").textContent = r.ok ? (action === "trigger" ? name + " made job " + body.id : name + " " + action + "d") : action + " refused: " + (body.error || r.status);
  schedulesAt = 0; // read the list again at the next tick
  tick();
}

// drawTimeline plots the selected job's progress over time (as this worker sampled it) with the
// elections of the cluster marked, like the load test's plots.
function drawTimeline() {
  const box = $("#timeline");
  const j = sampled.get(selected);
  $("#timeline-job").textContent = selected ? selected + (j ? " (" + j.type + ")" : "") : "";
  const s = (j && j.samples) || [];
  // Without samples (a job that ended before this page, or this worker, saw it run), the
  // moments storage keeps: submitted, started, map done, reduce done, finished.
  if (s.length < 2 && detail && detail.id === selected && (detail.timeline || []).length) { box.replaceChildren(storedTimeline(detail)); return; }
  if (!j) { box.replaceChildren(el("p", { class: "muted" }, selected ? "No progress samples of this job here (only recent jobs are sampled)." : "Pick a job above to see its progress over time, with elections marked.")); return; }
  if (s.length < 2) { box.replaceChildren(el("p", { class: "muted" }, "Collecting samples…")); return; }
  const W = box.clientWidth || 900, H = 200, L = 48, R = 12, T = 10, B = 28;
  const t0 = new Date(s[0].at).getTime(), t1 = Math.max(new Date(s[s.length - 1].at).getTime(), t0 + 1000);
  const total = Math.max(j.shards_total, 1);
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
  const y = (d) => T + (1 - d / total) * (H - T - B);
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  const add = (tag, a, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(a)) e.setAttribute(k, v);
    if (text != null) e.textContent = text;
    svg.append(e);
    return e;
  };
  add("line", { x1: L, y1: y(0), x2: W - R, y2: y(0), stroke: "#ccd" });
  add("line", { x1: L, y1: y(total), x2: W - R, y2: y(total), stroke: "#eee" });
  add("text", { x: 4, y: y(total) + 4 }, total);
  add("text", { x: 4, y: y(0) + 4 }, "0");
  add("text", { x: L, y: H - 8 }, clock(t0));
  add("text", { x: W - R - 60, y: H - 8 }, clock(t1));
  for (const e of cluster.events) {
    const t = new Date(e.at).getTime();
    if (e.kind !== "elected" || t < t0 || t > t1) continue;
    add("line", { x1: x(t), y1: T, x2: x(t), y2: H - B, stroke: "#2e9d5b", "stroke-dasharray": "4,3" });
    add("text", { x: x(t) + 3, y: T + 10, class: "election" }, "elected " + e.worker + " (epoch " + e.epoch + ")");
  }
  const pts = s.map((p) => x(new Date(p.at).getTime()).toFixed(1) + "," + y(p.done).toFixed(1)).join(" ");
  add("polyline", { points: pts, fill: "none", stroke: "#2f6fdb", "stroke-width": 2 });
  box.replaceChildren(svg);
}

// storedTimeline lists a job's stored moments, each with its time since submission.
function storedTimeline(d) {
  const t0 = new Date(d.timeline[0].at).getTime();
  return el("ol", { id: "timeline-marks", class: "events" }, ...d.timeline.map((m) => el("li", { "data-what": m.what },
    m.what + " " + clock(m.at) + (m.what === "submitted" ? "" : " (+" + ((new Date(m.at).getTime() - t0) / 1000).toFixed(2) + " s)"))));
}

// svgChart returns an inline SVG of W×H with axes: x from t0 to t1 (times), y from 0 to ymax.
function svgChart(W, H, t0, t1, ymax, ylabel) {
  const L = 44, R = 8, T = 8, B = 22;
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  const c = {
    svg, x: (t) => L + ((t - t0) / Math.max(t1 - t0, 1)) * (W - L - R), y: (v) => T + (1 - v / ymax) * (H - T - B),
    add(tag, a, text) {
      const e = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(a)) e.setAttribute(k, v);
      if (text != null) e.textContent = text;
      svg.append(e);
      return e;
    },
  };
  c.add("line", { x1: L, y1: c.y(0), x2: W - R, y2: c.y(0), stroke: "#ccd" });
  c.add("text", { x: 2, y: c.y(ymax) + 8 }, ylabel);
  c.add("text", { x: 2, y: c.y(0) }, "0");
  c.add("text", { x: L, y: H - 6 }, clock(t0));
  c.add("text", { x: W - R - 56, y: H - 6 }, clock(t1));
  return c;
}

// drawCharts draws the last hour (api/charts): shards a second, and each ended job's latency.
function drawCharts() {
  if (!charts || $("#charts").hidden) return;
  $("#charts-note").textContent = charts.error ? "unavailable: " + charts.error : (charts.partial ? "(more jobs than one read: the oldest left out)" : "");
  if (charts.error) return;
  const t0 = new Date(charts.from).getTime(), t1 = new Date(charts.to).getTime(), step = charts.step_seconds * 1000;
  const W = Math.max(($("#chart-rate").clientWidth || 420), 260), H = 140;
  const rates = charts.shards_per_second || [];
  const rmax = Math.max(...rates, 0);
  const rc = svgChart(W, H, t0, t1, rmax > 0 ? rmax * 1.1 : 1, rmax > 0 ? (rmax >= 10 ? rmax.toFixed(0) : rmax.toFixed(1)) + "/s" : "1/s");
  rc.svg.id = "chart-rate-svg";
  const pts = rates.map((v, i) => rc.x(t0 + i * step + step / 2).toFixed(1) + "," + rc.y(v).toFixed(1));
  if (pts.length) rc.add("polyline", { points: pts.join(" "), fill: "none", stroke: "#2f6fdb", "stroke-width": 2 });
  rc.add("title", {}, "peak " + rmax.toFixed(1) + " shards/s");
  $("#chart-rate").replaceChildren(rc.svg);
  const jobsEnded = charts.jobs || [];
  const lmax = Math.max(...jobsEnded.map((j) => j.seconds), 0);
  const lc = svgChart(W, H, t0, t1, lmax > 0 ? lmax * 1.1 : 1, lmax > 0 ? secs(lmax) : "1 s");
  lc.svg.id = "chart-latency-svg";
  for (const j of jobsEnded) {
    const dot = lc.add("circle", { cx: lc.x(new Date(j.finished_at).getTime()).toFixed(1), cy: lc.y(j.seconds).toFixed(1), r: 3,
      fill: j.state === "succeeded" ? "#2e9d5b" : "#c8423b", "data-id": j.id });
    const tip = document.createElementNS("http://www.w3.org/2000/svg", "title");
    tip.textContent = j.id + " " + j.type + " " + j.state + ": " + secs(j.seconds);
    dot.append(tip);
    dot.addEventListener("click", () => pick(j.id));
  }
  if (!jobsEnded.length) lc.add("text", { x: W / 2 - 50, y: H / 2 }, "no job ended in the hour");
  $("#chart-latency").replaceChildren(lc.svg);
}

for (const a of ["cancel", "retry", "delete"]) $("#detail-" + a).addEventListener("click", () => act(a));
$("#api-token").value = token;
$("#token-save").addEventListener("click", () => {
  token = $("#api-token").value.trim();
  if (token) sessionStorage.setItem("mapagg-api-token", token); else sessionStorage.removeItem("mapagg-api-token");
  checkToken().then(tick);
});
const refilter = () => { pages = [""]; tick(); };
$("#filter-state").addEventListener("change", refilter);
$("#filter-type").addEventListener("change", refilter);
$("#filters").addEventListener("submit", (e) => { e.preventDefault(); refilter(); });
// Search: storage lists the jobs whose id starts with the text (api/v1/jobs?prefix=); the list
// shows them, and the one job found opens. Empty: every job again.
$("#search-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const q = $("#search").value.trim().toLowerCase();
  const info = $("#search-info");
  info.textContent = "";
  if (q && !/^[a-z0-9-]{1,64}$/.test(q)) { info.textContent = "search: give a job id or its start (a-z, 0-9 and '-', e.g. 20261128-1012)"; return; }
  search = q; pages = [""]; listedURL = "";
  if (!q) { tick(); return; }
  try {
    const r = await fetch("api/v1/jobs?limit=25&prefix=" + encodeURIComponent(q), { cache: "no-store" });
    const page = await r.json();
    if (!r.ok || page.error) throw new Error(page.error || String(r.status));
    const found = page.jobs || [];
    info.textContent = found.length ? found.length + (page.next ? "+" : "") + " job" + (found.length === 1 ? "" : "s") + " start with " + q : "no job id starts with " + q;
    if (found.length === 1) { pick(found[0].id); return; }
  } catch (err) { info.textContent = "search failed: " + err.message; }
  tick();
});
window.addEventListener("popstate", () => pick(jobFromPath(), false));
$("#page-older").addEventListener("click", () => { if (nextCursor) { pages.push(nextCursor); tick(); } });
$("#page-newer").addEventListener("click", () => { if (pages.length > 1) { pages.pop(); tick(); } });

if (jobFromPath()) { selected = jobFromPath(); pinned = true; document.title = "mapagg job " + selected; }
showView();
checkToken().then(tick);
setInterval(tick, 1000);
