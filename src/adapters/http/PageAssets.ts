/**
 * The runs page's assets: one stylesheet and one script, plain CSS and JavaScript
 * kept as strings so the package needs no build step and no file beside the code.
 *
 * The script draws what the library already records: the EventLog's events
 * grouped by request (lifecycle states as bands, inferences, tool calls and
 * steps as bars with their durations, tokens and errors, each vote with every
 * replica's answer) and the durable runs with their thread records and the human
 * slot a run waits on. It has two sources: a live server (`GET /v1/events`,
 * `/v1/events/stream`, `/v1/runs`, `/v1/runs/{id}/events`, with the API key typed
 * into the page or given once in its address's fragment (`/#key=...`, the link
 * `pagantic serve` logs; kept for the tab, then taken out of the address) and
 * sent as a Bearer header, never in a request's URL) or the data of a
 * trace file embedded in the page (`pagantic trace show`).
 *
 * Every value from the data is rendered as text (`textContent`, attributes set
 * one by one), never parsed as HTML, and every list is bounded.
 */
import { timeline } from "./PageTimeline.js"

/** The stylesheet. */
export const css = String.raw`
:root { color-scheme: light; --ink: #1d2330; --muted: #667085; --line: #e4e7ec; --bg: #f8f9fb;
  --inference: #3b6fd8; --tool: #14907b; --step: #8a5cd6; --context: #c07a12; --record: #51607a;
  --error: #c0362c; --waiting: #d99a06; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink); background: var(--bg); }
header { display: flex; gap: 12px; align-items: center; padding: 10px 16px; background: #fff; border-bottom: 1px solid var(--line); flex-wrap: wrap; }
header h1 { font-size: 16px; margin: 0 12px 0 0; }
header input { font: inherit; padding: 4px 8px; border: 1px solid var(--line); border-radius: 4px; width: 220px; }
button { font: inherit; padding: 4px 10px; border: 1px solid #c9ced8; background: #fff; border-radius: 4px; cursor: pointer; }
button:hover { background: #f1f3f7; }
#notice { color: var(--muted); }
#notice.problem { color: var(--error); }
main { display: grid; grid-template-columns: 320px 1fr; min-height: calc(100vh - 50px); }
nav { border-right: 1px solid var(--line); background: #fff; overflow-y: auto; max-height: calc(100vh - 50px); }
nav h2 { font-size: 12px; text-transform: uppercase; letter-spacing: .05em; color: var(--muted); margin: 14px 12px 6px; }
nav ol { list-style: none; margin: 0; padding: 0; }
nav li { padding: 6px 12px; border-bottom: 1px solid var(--line); cursor: pointer; }
nav li:hover, nav li.selected { background: #eef3fd; }
nav .id { font-family: ui-monospace, Menlo, monospace; font-size: 12px; word-break: break-all; }
nav .meta { color: var(--muted); font-size: 12px; }
.empty { color: var(--muted); padding: 6px 12px; font-size: 13px; }
.status { display: inline-block; font-size: 11px; padding: 0 6px; border-radius: 8px; background: #e4e7ec; margin-right: 6px; }
.status-completed { background: #d3f0e1; color: #11613b; }
.status-failed { background: #fadcd9; color: #8e231b; }
.status-running { background: #dbe6fb; color: #1f4aa8; }
.status-suspended { background: #fdeccb; color: #7a5200; }
.status-cancelled, .status-stale { background: #e4e7ec; color: #475467; }
section#detail { padding: 16px 20px; overflow-x: hidden; }
#detail h2 { font-size: 16px; margin: 0 0 4px; word-break: break-all; }
#detail .summary { color: var(--muted); margin-bottom: 12px; }
.timeline { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; }
.row { display: grid; grid-template-columns: 300px 1fr; gap: 10px; align-items: center; min-height: 24px; border-bottom: 1px dashed #eef0f3; }
.row:last-child { border-bottom: 0; }
.row .label { font-size: 12px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.row .error { grid-column: 1 / span 2; color: var(--error); font-size: 12px; padding: 0 0 4px 12px; word-break: break-word; }
.track { position: relative; height: 18px; }
.bar, .band, .mark { position: absolute; top: 2px; height: 14px; min-width: 3px; border-radius: 3px; }
.bar.inference { background: var(--inference); }
.bar.tool { background: var(--tool); }
.bar.step { background: var(--step); }
.bar.context { background: var(--context); }
.bar.record { background: var(--record); }
.bar.failed { background: var(--error); }
.lifecycle .track { height: 22px; }
.band { top: 0; height: 22px; border-radius: 0; font-size: 11px; color: #fff; padding: 3px 4px; overflow: hidden; white-space: nowrap; border-right: 1px solid #fff; }
.state-INIT { background: #98a2b3; } .state-PLAN { background: #7a5af8; } .state-PREPARE { background: #2e90fa; }
.state-EXECUTE { background: #1570ef; } .state-VALIDATE { background: #0e9384; } .state-COMPLETE { background: #12b76a; }
.state-ERROR { background: var(--error); } .state-CANCELLED { background: #667085; } .state-SUSPENDED, .band.waiting { background: var(--waiting); }
.axis { display: flex; justify-content: space-between; color: var(--muted); font-size: 11px; margin: 0 0 4px 310px; }
.vote { margin: 8px 0; padding: 8px 12px; background: #fff; border: 1px solid var(--line); border-radius: 6px; }
.vote h3, .records h3, .waiting-slot h3 { font-size: 13px; margin: 0 0 6px; }
.vote .vote-error { color: var(--error); font-size: 12px; }
.replica { display: grid; grid-template-columns: 90px 1fr; gap: 8px; padding: 3px 0; border-top: 1px solid #eef0f3; font-size: 12px; }
.replica .answer { font-family: ui-monospace, Menlo, monospace; white-space: pre-wrap; word-break: break-word; }
.replica.winner .who { font-weight: 600; color: #11613b; }
.replica.failed .answer { color: var(--error); }
.waiting-slot { margin: 8px 0; padding: 8px 12px; background: #fff8e6; border: 1px solid #f5d48a; border-radius: 6px; }
.records { margin-top: 12px; }
table { border-collapse: collapse; width: 100%; background: #fff; font-size: 12px; }
td, th { text-align: left; padding: 3px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
td.body { font-family: ui-monospace, Menlo, monospace; word-break: break-word; }
details { margin-top: 12px; }
summary { cursor: pointer; color: var(--muted); }
.trace-banner { color: var(--muted); }
`

/** The script: the same code draws a live server's data and a trace file's. */
export const script = String.raw`
(function () {
  "use strict";
  var LIMITS = { events: 5000, requests: 200, runs: 100, records: 500, rows: 300, replicas: 50, text: 300 };
  var TERMINAL = { completed: true, failed: true, cancelled: true };
  var state = { events: [], runs: new Map(), runList: [], selected: null, key: "", connected: false, eventsAbort: null, runAbort: null, pending: false, runsMissing: false, drafts: new Map(), actionError: null };

  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function cut(value, n) {
    var max = n || LIMITS.text;
    var s = typeof value === "string" ? value : JSON.stringify(value);
    if (s === undefined) s = String(value);
    return s.length > max ? s.slice(0, max) + "\u2026" : s;
  }
  function ms(n) { return n >= 1000 ? (n / 1000).toFixed(2) + " s" : Math.round(n) + " ms"; }
  function clock(t) { var d = new Date(t); return isNaN(d.getTime()) ? "" : d.toLocaleTimeString(); }
  function notice(text, problem) { var n = $("notice"); n.textContent = text; n.className = problem ? "problem" : ""; }

  // ---------------------------------------------------------------- data

  function addEvents(list) {
    for (var i = 0; i < list.length; i++) {
      var e = list[i];
      if (e && typeof e === "object" && typeof e._tag === "string" && typeof e.timestamp === "number") state.events.push(e);
    }
    if (state.events.length > LIMITS.events) state.events = state.events.slice(state.events.length - LIMITS.events);
    schedule();
  }

  function runEntry(view) {
    var entry = state.runs.get(view.id);
    if (!entry) { entry = { view: view, records: [], seen: new Set() }; state.runs.set(view.id, entry); }
    else entry.view = view;
    return entry;
  }

  function addRecord(entry, record) {
    if (!record || typeof record.seq !== "number" || entry.seen.has(record.seq)) return;
    entry.seen.add(record.seq);
    entry.records.push(record);
    entry.records.sort(function (a, b) { return a.seq - b.seq; });
    if (entry.records.length > LIMITS.records) entry.records = entry.records.slice(entry.records.length - LIMITS.records);
  }

  function requestOf(e) { return e.correlation && typeof e.correlation.requestId === "string" ? e.correlation.requestId : undefined; }

  function statusOfState(s) {
    if (s === "COMPLETE") return "completed";
    if (s === "ERROR") return "failed";
    if (s === "CANCELLED") return "cancelled";
    if (s === "SUSPENDED") return "suspended";
    return "running";
  }

  function requests() {
    var by = new Map();
    for (var i = 0; i < state.events.length; i++) {
      var e = state.events[i];
      var id = requestOf(e);
      if (id === undefined) continue;
      var r = by.get(id);
      if (!r) { r = { id: id, first: e.timestamp, last: e.timestamp, events: [], lifecycle: undefined }; by.set(id, r); }
      r.events.push(e);
      if (e.timestamp < r.first) r.first = e.timestamp;
      if (e.timestamp > r.last) r.last = e.timestamp;
      if (e._tag === "LifecycleTransition") r.lifecycle = e.toState;
    }
    return Array.from(by.values()).sort(function (a, b) { return b.first - a.first; }).slice(0, LIMITS.requests);
  }

  // ---------------------------------------------------------------- the lists

  function listItem(kind, id, status, meta) {
    var li = el("li");
    li.setAttribute("data-kind", kind);
    li.setAttribute("data-id", id);
    if (state.selected && state.selected.kind === kind && state.selected.id === id) li.className = "selected";
    var top = el("div");
    top.appendChild(el("span", "status status-" + status, status));
    top.appendChild(el("span", "id", cut(id, 120)));
    li.appendChild(top);
    li.appendChild(el("div", "meta", meta));
    li.addEventListener("click", function () { select(kind, id); });
    return li;
  }

  function renderLists() {
    var reqs = $("requests");
    reqs.replaceChildren();
    var list = requests();
    if (list.length === 0) reqs.appendChild(el("li", "empty", "no requests recorded yet"));
    list.forEach(function (r) {
      reqs.appendChild(listItem("request", r.id, statusOfState(r.lifecycle), clock(r.first) + " \u00b7 " + r.events.length + " events \u00b7 " + ms(r.last - r.first)));
    });
    var runs = $("runs");
    runs.replaceChildren();
    var views = state.runList.slice(0, LIMITS.runs);
    if (views.length === 0) runs.appendChild(el("li", "empty", state.runsMissing ? "this server keeps no durable runs" : "no durable runs"));
    views.forEach(function (v) {
      runs.appendChild(listItem("run", v.id, v.status, cut(v.definition, 60) + " \u00b7 " + clock(v.createdAt) + (v.waitingOn ? " \u00b7 waiting on " + cut(v.waitingOn, 60) : "")));
    });
  }
${timeline}
  // ---------------------------------------------------------------- the live source

  function headers() { return state.key ? { authorization: "Bearer " + state.key } : {}; }

  function problemOf(status, body) {
    var e = body && body.error;
    var message = e && typeof e.message === "string" ? e.message : "HTTP " + status;
    return status === 401 ? "this server needs an API key: type it above and press Connect (" + cut(message, 120) + ")" : cut(message, 200);
  }

  function getJson(path) {
    return fetch(path, { headers: headers(), cache: "no-store" }).then(function (res) {
      return res.text().then(function (text) {
        var body; try { body = JSON.parse(text); } catch (_) { body = undefined; }
        if (!res.ok) { var err = new Error(problemOf(res.status, body)); err.status = res.status; throw err; }
        return body;
      });
    });
  }

  /** A POST of \`body\` as JSON with the key; the reply's JSON, or an Error saying what the server refused. */
  function postJson(path, body) {
    var h = headers();
    h["content-type"] = "application/json";
    return fetch(path, { method: "POST", headers: h, body: JSON.stringify(body), cache: "no-store" }).then(function (res) {
      return res.text().then(function (text) {
        var reply; try { reply = JSON.parse(text); } catch (_) { reply = undefined; }
        if (!res.ok) throw new Error(problemOf(res.status, reply));
        return reply;
      });
    });
  }

  /** Server-sent events over fetch (EventSource cannot send the Authorization header). */
  function stream(path, signal, onEvent) {
    return fetch(path, { headers: headers(), signal: signal, cache: "no-store" }).then(function (res) {
      if (!res.ok || !res.body) {
        return res.text().then(function (text) {
          var body; try { body = JSON.parse(text); } catch (_) { body = undefined; }
          throw new Error(problemOf(res.status, body));
        });
      }
      var reader = res.body.getReader(), decoder = new TextDecoder(), buffer = "";
      function pump() {
        return reader.read().then(function (chunk) {
          if (chunk.done) return;
          buffer += decoder.decode(chunk.value, { stream: true });
          if (buffer.length > 8 * 1024 * 1024) throw new Error("an event larger than 8 MiB");
          var at;
          while ((at = buffer.indexOf("\n\n")) !== -1) {
            var block = buffer.slice(0, at); buffer = buffer.slice(at + 2);
            var name = "message", data = [];
            block.split("\n").forEach(function (line) {
              if (line.indexOf("event:") === 0) name = line.slice(6).trim();
              else if (line.indexOf("data:") === 0) data.push(line.slice(5).replace(/^ /, ""));
            });
            if (data.length > 0) { var parsed; try { parsed = JSON.parse(data.join("\n")); } catch (_) { parsed = undefined; } if (parsed !== undefined) onEvent(name, parsed); }
          }
          return pump();
        });
      }
      return pump();
    });
  }

  function refreshRuns() {
    return getJson("v1/runs?limit=" + LIMITS.runs).then(function (body) {
      state.runsMissing = false;
      state.runList = body && Array.isArray(body.runs) ? body.runs : [];
      state.runList.forEach(function (v) { runEntry(v); });
      schedule();
    }, function (err) {
      if (err.status === 404) { state.runsMissing = true; state.runList = []; schedule(); return; }
      throw err;
    });
  }

  function followRun(id) {
    if (state.runAbort) state.runAbort.abort();
    var abort = new AbortController();
    state.runAbort = abort;
    getJson("v1/runs/" + encodeURIComponent(id)).then(function (view) {
      runEntry(view);
      schedule();
      return stream("v1/runs/" + encodeURIComponent(id) + "/events", abort.signal, function (name, data) {
        var entry = state.runs.get(id);
        if (!entry) return;
        if (name === "message") addRecord(entry, data);
        else if (name === "end") { entry.view = data; refreshRuns().catch(function () {}); }
        schedule();
      });
    }).catch(function (err) { if (!abort.signal.aborted) notice(err.message, true); });
  }

  function connect() {
    state.key = $("key").value;
    try { if (state.key) sessionStorage.setItem("pagantic-key", state.key); } catch (err) { /* storage off: the field keeps it */ }
    if (state.eventsAbort) state.eventsAbort.abort();
    var abort = new AbortController();
    state.eventsAbort = abort;
    state.events = [];
    notice("connecting\u2026");
    refreshRuns().then(function () {
      notice("live");
      state.connected = true;
      return stream("v1/events/stream", abort.signal, function (name, data) {
        if (name === "message") addEvents([data]);
      });
    }).catch(function (err) { if (!abort.signal.aborted) { state.connected = false; notice(err.message, true); } });
  }

  // ---------------------------------------------------------------- the trace

  function traceLines() {
    var lines = state.events.map(function (e) { return JSON.stringify(e); });
    state.runs.forEach(function (entry) { lines.push(JSON.stringify({ _tag: "Run", run: entry.view, records: entry.records })); });
    return lines.join("\n") + "\n";
  }

  function download() {
    var url = URL.createObjectURL(new Blob([traceLines()], { type: "application/x-ndjson" }));
    var a = el("a");
    a.href = url;
    a.download = "pagantic-trace.jsonl";
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(function () { URL.revokeObjectURL(url); }, 1000);
  }

  var source = { live: true };

  function start() {
    var embedded = $("pagantic-trace");
    if (embedded) {
      source.live = false;
      var trace = JSON.parse(embedded.textContent || "{}");
      addEvents(Array.isArray(trace.events) ? trace.events : []);
      (Array.isArray(trace.runs) ? trace.runs : []).forEach(function (run) {
        var entry = runEntry(run.run);
        (Array.isArray(run.records) ? run.records : []).forEach(function (r) { addRecord(entry, r); });
      });
      state.runList = Array.from(state.runs.values()).map(function (e) { return e.view; });
      notice("trace file: " + state.events.length + " events, " + state.runList.length + " runs");
      render();
      return;
    }
    // a key in the URL's fragment (the link pagantic serve logs) is read once, kept for the tab, and taken out of the address bar
    var given = /^#key=([^&]+)$/.exec(location.hash);
    try {
      if (given) {
        sessionStorage.setItem("pagantic-key", decodeURIComponent(given[1]));
        history.replaceState(null, "", location.pathname + location.search);
      }
      $("key").value = sessionStorage.getItem("pagantic-key") || "";
    } catch (err) { if (given) $("key").value = decodeURIComponent(given[1]); }
    $("connect").addEventListener("click", connect);
    $("key").addEventListener("keydown", function (ev) { if (ev.key === "Enter") connect(); });
    $("download").addEventListener("click", download);
    setInterval(function () { if (state.connected) refreshRuns().catch(function () {}); }, 3000);
    render();
    connect();
  }

  window.paganticPage = { state: state, render: render, traceLines: traceLines };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
`

/** The page's body: the same markup for the live page and a trace file (without the live controls). */
export const body = (live: boolean): string => `
<header>
  <h1>pagantic runs</h1>
  ${
  live
    ? `<input id="key" type="password" autocomplete="off" placeholder="API key (if the server has one)" aria-label="API key">
  <button id="connect" type="button">Connect</button>
  <button id="download" type="button">Download trace</button>`
    : `<span class="trace-banner">from a trace file</span>`
}
  <span id="notice"></span>
</header>
<main>
  <nav>
    <h2>Recent requests</h2>
    <ol id="requests"></ol>
    <h2>Durable runs</h2>
    <ol id="runs"></ol>
  </nav>
  <section id="detail"></section>
</main>`
