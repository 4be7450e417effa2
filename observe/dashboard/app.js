// The mapagg dashboard: polls /api/cluster and /api/jobs once a second (the worker caches both,
// so many open pages cost storage nothing more) and renders them. No dependencies.
"use strict";

const $ = (s) => document.querySelector(s);
let selected = null;   // the job whose timeline is shown
let cluster = null;    // last /api/cluster
let jobs = [];         // last /api/jobs
let cancelEnabled = false;

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

async function tick() {
  try {
    const [c, j] = await Promise.all([getJSON("api/cluster"), getJSON("api/jobs")]);
    cluster = c; jobs = j.jobs || [];
    cancelEnabled = !!c.cancel_enabled;
    render(j.error);
    $("#status").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("#status").textContent = "cannot reach the worker: " + e.message;
  }
}

function render(jobsErr) {
  const c = cluster;
  $("#served-by").textContent = c.worker;
  $("#mode").textContent = cancelEnabled ? "cancelling enabled (--dashboard-cancel)" : "read-only";
  const l = c.leader;
  $("#leader-id").textContent = l ? l.ID : "none";
  $("#leader-epoch").textContent = l ? l.Epoch : "–";
  $("#leader-since").textContent = l ? "since " + clock(l.Since) + " (" + ago(l.Since) + ")" : (c.leader_error || "nobody holds the lease");

  // Workers.
  const wb = $("#workers tbody");
  wb.replaceChildren(...c.members.map((m) => el("tr", { class: m.leader ? "leader-row" : "", "data-id": m.id },
    el("td", {}, m.id),
    el("td", {}, m.leader ? "leader (epoch " + m.epoch + ")" : "follower"),
    el("td", {}, m.in_flight + " / " + m.concurrency),
    el("td", {}, ago(m.started_at)),
    el("td", { class: "muted" }, m.version),
    el("td", { class: "muted" }, (m.job_types || []).join(", ")))));

  // Epoch history: elections heard since this worker started, plus the current lease.
  const terms = new Map();
  for (const e of c.events) {
    if (e.kind === "elected") terms.set(e.epoch, { epoch: e.epoch, worker: e.worker, at: e.at });
    if ((e.kind === "lost" || e.kind === "stepped_down") && terms.has(e.epoch)) terms.get(e.epoch).ended = e.kind + " " + clock(e.at);
  }
  if (l && !terms.has(l.Epoch)) terms.set(l.Epoch, { epoch: l.Epoch, worker: l.ID, at: l.Since });
  const eb = $("#epochs tbody");
  eb.replaceChildren(...[...terms.values()].sort((a, b) => b.epoch - a.epoch).slice(0, 12).map((t) => el("tr", {},
    el("td", {}, t.epoch), el("td", {}, t.worker), el("td", {}, clock(t.at)),
    el("td", { class: "muted" }, t.ended || (l && l.Epoch === t.epoch ? "leading" : "")))));

  // Jobs.
  const jb = $("#jobs tbody");
  jb.replaceChildren(...jobs.map(jobRow));
  $("#jobs-empty").style.display = jobs.length ? "none" : "";
  if (jobsErr) $("#jobs-empty").textContent = "Reading jobs failed: " + jobsErr;
  if (!selected && jobs.length) selected = jobs[0].id;
  drawTimeline();

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
  const actions = el("td", {});
  if (cancelEnabled && (j.state === "pending" || j.state === "running")) {
    actions.append(el("button", { onclick: (ev) => { ev.stopPropagation(); cancelJob(j.id); } }, "cancel"));
  }
  return el("tr", { class: "job" + (j.id === selected ? " selected" : ""), "data-id": j.id, "data-state": j.state,
      onclick: () => { selected = j.id; render(); } },
    el("td", {}, j.id), el("td", {}, j.type), el("td", { class: "state-" + j.state }, j.state + (j.share ? " · " + Math.round(100 * j.share) + " % share" : "") +
      ((j.error || j.unreadable || j.note) ? ": " + (j.error || j.unreadable || j.note) : "")),
    el("td", {}, bar), el("td", {}, j.rate ? j.rate.toFixed(1) + " /s" : "–"), el("td", {}, secs(j.eta_seconds)),
    el("td", {}, j.duplicates), actions);
}

async function cancelJob(id) {
  if (!confirm("Cancel job " + id + "?")) return;
  const r = await fetch("api/jobs/" + encodeURIComponent(id) + "/cancel", { method: "POST" });
  const body = await r.json();
  if (!r.ok) alert(body.error || r.status);
  tick();
}

// drawTimeline plots the selected job's progress over time (as this worker sampled it) with the
// elections of the cluster marked, like the load test's plots.
function drawTimeline() {
  const box = $("#timeline");
  const j = jobs.find((x) => x.id === selected);
  $("#timeline-job").textContent = j ? j.id + " (" + j.type + ")" : "";
  if (!j) return;
  const s = j.samples || [];
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

tick();
setInterval(tick, 1000);
