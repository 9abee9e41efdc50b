/**
 * The runs page's timeline (part of the script in PageAssets.ts, which places it
 * in its scope): a request's lifecycle states as bands, its inferences, tool
 * calls and steps as bars with their durations, tokens and errors, each vote
 * with every replica's answer, and a durable run's thread records. Every value
 * from the data is rendered as text, never parsed as HTML.
 */

/** The timeline's functions, as script text. */
export const timeline = String.raw`
  // ---------------------------------------------------------------- the timeline

  function scale(t0, t1) {
    var span = Math.max(1, t1 - t0);
    return function (t) { return Math.max(0, Math.min(100, ((t - t0) / span) * 100)); };
  }

  function place(node, x, from, to) {
    var left = x(from);
    node.style.left = left + "%";
    node.style.width = Math.max(0, x(to) - left) + "%";
    return node;
  }

  function row(cls, label, barClass, x, from, to, error) {
    var r = el("div", "row " + cls);
    r.appendChild(el("div", "label", label));
    var track = el("div", "track");
    var bar = place(el("div", barClass), x, from, to);
    bar.title = label;
    track.appendChild(bar);
    r.appendChild(track);
    if (error) r.appendChild(el("div", "error", error));
    return r;
  }

  function axis(t0, t1) {
    var a = el("div", "axis");
    a.appendChild(el("span", null, "0 ms"));
    a.appendChild(el("span", null, ms((t1 - t0) / 2)));
    a.appendChild(el("span", null, ms(t1 - t0)));
    return a;
  }

  function lifecycleRow(transitions, x, t1, extra) {
    var r = el("div", "row lifecycle");
    r.appendChild(el("div", "label", "lifecycle"));
    var track = el("div", "track");
    for (var i = 0; i < transitions.length; i++) {
      var t = transitions[i];
      var next = i + 1 < transitions.length ? transitions[i + 1].timestamp : t1;
      var band = place(el("div", "band state-" + String(t.toState).replace(/[^A-Z]/g, ""), t.toState), x, t.timestamp, next);
      band.setAttribute("data-state", String(t.toState));
      band.title = t.fromState + " \u2192 " + t.toState + (t.reason ? ": " + cut(t.reason, 200) : "");
      track.appendChild(band);
    }
    if (extra) track.appendChild(extra);
    r.appendChild(track);
    return r;
  }

  /**
   * The request's own moves: inner loops (a vote's replicas) record the same move
   * (from, to, attempt) before the request makes it, so the last of each is kept.
   */
  function ownMoves(transitions) {
    var last = new Map();
    transitions.forEach(function (t, i) { last.set(t.fromState + ">" + t.toState + ">" + t.attempt, i); });
    return transitions.filter(function (t, i) { return last.get(t.fromState + ">" + t.toState + ">" + t.attempt) === i; });
  }

  function errorText(e) {
    if (!e.error && !e.errorCode) return undefined;
    return (e.errorCode ? e.errorCode + ": " : "") + cut(e.error || "", 500);
  }

  function voteBlock(e) {
    var d = e.data || {};
    var box = el("div", "vote");
    var head = "vote (" + cut(d.strategy || "?", 40) + ")";
    if (typeof d.winner === "number") head += ": replica " + d.winner + " wins";
    if (typeof d.confidence === "number") head += ", confidence " + d.confidence.toFixed(2);
    if (typeof d.quorum === "number") head += ", quorum " + d.quorum;
    box.appendChild(el("h3", null, head));
    if (e.error) box.appendChild(el("div", "vote-error", cut(e.error, 500)));
    var replicas = Array.isArray(d.replicas) ? d.replicas.slice(0, LIMITS.replicas) : [];
    replicas.forEach(function (rep) {
      if (!rep || typeof rep !== "object") return;
      var failed = rep.answer === undefined;
      var line = el("div", "replica" + (failed ? " failed" : "") + (rep.replica === d.winner ? " winner" : ""));
      line.setAttribute("data-replica", String(rep.replica));
      line.appendChild(el("span", "who", "replica " + cut(String(rep.replica), 10) + (rep.replica === d.winner ? " \u2713" : "")));
      line.appendChild(el("span", "answer", failed ? cut((rep.code || "") + ": " + (rep.message || ""), 500) : cut(rep.answer, 1000)));
      box.appendChild(line);
    });
    return box;
  }

  function renderRequest(detail, r) {
    var events = r.events.slice().sort(function (a, b) { return a.timestamp - b.timestamp; });
    var t0 = r.first, t1 = Math.max(r.last, r.first + 1);
    for (var k = 0; k < events.length; k++) {
      var d = events[k].durationMs;
      if (typeof d === "number" && events[k].timestamp - d < t0) t0 = events[k].timestamp - d;
    }
    var x = scale(t0, t1);
    detail.appendChild(el("h2", null, "request " + cut(r.id, 200)));
    detail.appendChild(el("div", "summary", statusOfState(r.lifecycle) + " \u00b7 " + clock(r.first) + " \u00b7 " + ms(r.last - r.first) + " \u00b7 " + events.length + " events"));
    var tl = el("div", "timeline");
    tl.appendChild(axis(t0, t1));
    var transitions = ownMoves(events.filter(function (e) { return e._tag === "LifecycleTransition" && !(e.correlation && e.correlation.stepName); }));
    if (transitions.length > 0) tl.appendChild(lifecycleRow(transitions, x, t1));
    var end = transitions[transitions.length - 1];
    if (end && (end.toState === "ERROR" || end.toState === "CANCELLED")) {
      var ended = el("div", "row error request-error", end.toState + ": " + cut(end.reason || "", 500));
      tl.appendChild(ended);
    }
    var starts = new Map(), votes = [], rows = 0;
    for (var i = 0; i < events.length && rows < LIMITS.rows; i++) {
      var e = events[i];
      if (e._tag === "InferenceStart") starts.set("i:" + e.inferenceId, e);
      else if (e._tag === "ToolStart") starts.set("t:" + e.toolCallId, e);
      else if (e._tag === "InferenceEnd") {
        var s = starts.get("i:" + e.inferenceId);
        var from = s ? s.timestamp : e.timestamp - e.durationMs;
        var label = "inference \u00b7 " + ms(e.durationMs) + " \u00b7 " + e.tokensIn + " in / " + e.tokensOut + " out tokens \u00b7 " + e.finishReason;
        tl.appendChild(row("inference", label, "bar inference" + (e.finishReason === "error" ? " failed" : ""), x, from, e.timestamp, errorText(e)));
        rows++;
      } else if (e._tag === "ToolEnd") {
        var ts = starts.get("t:" + e.toolCallId);
        var tfrom = ts ? ts.timestamp : e.timestamp - e.durationMs;
        var tlabel = "tool " + cut(e.toolName, 60) + " \u00b7 " + ms(e.durationMs) + (e.success ? "" : " \u00b7 failed");
        var tr = row("tool", tlabel, "bar tool" + (e.success ? "" : " failed"), x, tfrom, e.timestamp, e.success ? undefined : errorText(e));
        tr.setAttribute("data-tool", cut(e.toolName, 60));
        tl.appendChild(tr);
        rows++;
      } else if (e._tag === "ContextRetrieved") {
        tl.appendChild(row("context", "context \u00b7 " + ms(e.durationMs) + " \u00b7 " + e.messageCount + " messages", "bar context", x, e.timestamp - e.durationMs, e.timestamp, e.error ? cut(e.error, 500) : undefined));
        rows++;
      } else if (e._tag === "Custom" && e.action === "vote") {
        votes.push(e);
      } else if (e._tag === "Custom" && typeof e.durationMs === "number") {
        var data = e.data || {};
        var what = data.step || data.agent || "";
        tl.appendChild(row("step", cut(e.action, 40) + (what ? " " + cut(what, 60) : "") + " \u00b7 " + ms(e.durationMs), "bar step" + (e.error ? " failed" : ""), x, e.timestamp - e.durationMs, e.timestamp, e.error ? cut(e.error, 500) : undefined));
        rows++;
      }
    }
    detail.appendChild(tl);
    votes.slice(0, 20).forEach(function (v) { detail.appendChild(voteBlock(v)); });
    detail.appendChild(eventTable(events));
  }

  function eventTable(events) {
    var box = el("details");
    box.appendChild(el("summary", null, "all events (" + events.length + ")"));
    var table = el("table");
    var t0 = events.length > 0 ? events[0].timestamp : 0;
    events.slice(0, LIMITS.rows).forEach(function (e) {
      var tr = el("tr");
      tr.appendChild(el("td", null, "+" + ms(e.timestamp - t0)));
      tr.appendChild(el("td", null, e._tag));
      tr.appendChild(el("td", null, cut(e.layer || "", 30)));
      var copy = Object.assign({}, e);
      delete copy._tag; delete copy.timestamp; delete copy.layer; delete copy.correlation;
      tr.appendChild(el("td", "body", cut(copy, 400)));
      table.appendChild(tr);
    });
    box.appendChild(table);
    return box;
  }

  function renderRun(detail, entry) {
    var v = entry.view;
    detail.appendChild(el("h2", null, "run " + cut(v.id, 200)));
    var summary = el("div", "summary");
    summary.appendChild(el("span", "status status-" + v.status, v.status));
    summary.appendChild(document.createTextNode(cut(v.definition, 80) + " \u00b7 started " + clock(v.createdAt) + " \u00b7 updated " + clock(v.updatedAt)));
    detail.appendChild(summary);
    if (v.status === "running" || v.status === "suspended") {
      var cancel = el("button", "cancel-run", "Cancel run");
      cancel.addEventListener("click", function () { act(v.id, "v1/runs/" + encodeURIComponent(v.id) + "/cancel", {}); });
      summary.appendChild(cancel);
    }
    if (state.actionError && state.actionError.run === v.id) detail.appendChild(el("div", "row error action-error", state.actionError.message));
    var records = entry.records;
    var times = records.map(function (r) { return Date.parse(r.at); }).filter(function (t) { return !isNaN(t); });
    var t0 = times.length > 0 ? Math.min.apply(null, times) : Date.parse(v.createdAt);
    var end = v.status === "suspended" || v.status === "running" ? Math.max(Date.now(), Date.parse(v.updatedAt)) : Date.parse(v.updatedAt);
    var last = times.length > 0 ? Math.max.apply(null, times) : t0;
    var t1 = Math.max(t0 + 1, end, last);
    var x = scale(t0, t1);
    var tl = el("div", "timeline");
    tl.appendChild(axis(t0, t1));
    records.slice(0, LIMITS.rows).forEach(function (r, i) {
      var at = Date.parse(r.at);
      var next = i + 1 < records.length ? Date.parse(records[i + 1].at) : at;
      // numbered within the run; the store's sequence number, shared by every run, is kept as data
      var label = "#" + (i + 1) + " " + r.kind + " " + cut(r.key, 80);
      var line = row("record", label, "bar record kind-" + String(r.kind).replace(/[^A-Z]/g, ""), x, at, Math.max(at, next));
      line.setAttribute("data-kind", String(r.kind));
      line.setAttribute("data-seq", String(r.seq));
      tl.appendChild(line);
    });
    if (v.status === "suspended" && v.waitingOn) {
      var band = place(el("div", "band waiting", "waiting on " + cut(v.waitingOn, 60)), x, last, t1);
      var wr = el("div", "row lifecycle");
      wr.appendChild(el("div", "label", "waiting for a human"));
      var track = el("div", "track");
      track.appendChild(band);
      wr.appendChild(track);
      tl.appendChild(wr);
    }
    detail.appendChild(tl);
    if (v.waitingOn) {
      var slot = el("div", "waiting-slot");
      slot.appendChild(el("h3", null, "waiting on the human slot " + cut(v.waitingOn, 100)));
      slot.appendChild(el("div", null, "The run is suspended until the slot is answered (here, or at POST /v1/runs/{id}/slots/{slot} by its responder's key or its secret) or its deadline passes."));
      if (v.status === "suspended") slot.appendChild(answerForm(v.id, v.waitingOn));
      detail.appendChild(slot);
    }
    if (v.error) {
      detail.appendChild(el("div", "row error", (v.error.code || "") + ": " + cut(v.error.message || "", 500)));
    }
    var box = el("div", "records");
    box.appendChild(el("h3", null, "records (" + records.length + ")"));
    var table = el("table");
    var head = el("tr");
    ["#", "kind", "key", "at", "body"].forEach(function (h) { head.appendChild(el("th", null, h)); });
    table.appendChild(head);
    records.slice(0, LIMITS.records).forEach(function (r, i) {
      var tr = el("tr");
      tr.appendChild(el("td", null, i + 1));
      tr.appendChild(el("td", null, r.kind));
      tr.appendChild(el("td", null, cut(r.key, 100)));
      tr.appendChild(el("td", null, clock(r.at)));
      var text = r.body === undefined ? "" : cut(r.body, 20000);
      if (text.length <= 400) {
        tr.appendChild(el("td", "body", text));
      } else {
        // a long body opens in place
        var cell = el("td", "body");
        var more = el("details", "long-body");
        more.appendChild(el("summary", null, cut(r.body, 400)));
        more.appendChild(el("pre", null, text));
        cell.appendChild(more);
        tr.appendChild(cell);
      }
      table.appendChild(tr);
    });
    box.appendChild(table);
    detail.appendChild(box);
    if (v.result !== undefined) {
      var res = el("details");
      res.appendChild(el("summary", null, "result"));
      res.appendChild(el("pre", "body", cut(v.result, 2000)));
      detail.appendChild(res);
    }
  }

  /** POSTs an action on run \`id\`; what the server refuses is shown with the run, and the run is read again. */
  function act(id, path, body) {
    state.actionError = null;
    return postJson(path, body).then(function () {
      state.drafts.delete(id);
      return getJson("v1/runs/" + encodeURIComponent(id)).then(function (view) { runEntry(view); refreshRuns().catch(function () {}); });
    }).catch(function (err) { state.actionError = { run: id, message: err.message }; }).then(schedule);
  }

  /** The answer to the slot \`key\` of run \`id\`: JSON to submit (kept while the page redraws), or a decline with a reason. */
  function answerForm(id, key) {
    var form = el("div", "slot-form");
    var text = el("textarea", "slot-answer");
    text.setAttribute("rows", "3");
    text.setAttribute("placeholder", "the answer, as JSON");
    text.value = state.drafts.get(id) || "";
    text.addEventListener("input", function () { state.drafts.set(id, text.value); });
    var slotPath = "v1/runs/" + encodeURIComponent(id) + "/slots/" + encodeURIComponent(key);
    var submit = el("button", "slot-submit", "Submit answer");
    submit.addEventListener("click", function () {
      var answer;
      try { answer = JSON.parse(text.value); } catch (_) { state.actionError = { run: id, message: "the answer is not JSON" }; schedule(); return; }
      act(id, slotPath, { response: { kind: "submit", answer: answer } });
    });
    var reason = el("select", "slot-reason");
    ["out_of_domain", "overbooked", "conflict_of_interest", "other"].forEach(function (r) { var o = el("option", null, r); o.value = r; reason.appendChild(o); });
    var decline = el("button", "slot-decline", "Decline");
    decline.addEventListener("click", function () { act(id, slotPath, { response: { kind: "decline", reason: reason.value } }); });
    form.appendChild(text);
    form.appendChild(submit);
    form.appendChild(reason);
    form.appendChild(decline);
    return form;
  }

  function renderDetail() {
    var detail = $("detail");
    // an answer being typed keeps its focus and caret across a redraw
    var typing = document.activeElement && document.activeElement.classList.contains("slot-answer")
      ? { start: document.activeElement.selectionStart, end: document.activeElement.selectionEnd } : null;
    detail.replaceChildren();
    var sel = state.selected;
    if (!sel) { detail.appendChild(el("div", "empty", "Pick a request or a run.")); return; }
    if (sel.kind === "request") {
      var r = requests().find(function (q) { return q.id === sel.id; });
      if (r) renderRequest(detail, r); else detail.appendChild(el("div", "empty", "no events for this request any more"));
    } else {
      var entry = state.runs.get(sel.id);
      if (entry) renderRun(detail, entry); else detail.appendChild(el("div", "empty", "loading\u2026"));
    }
    var answer = typing && detail.querySelector(".slot-answer");
    if (answer) { answer.focus(); answer.setSelectionRange(typing.start, typing.end); }
  }

  function render() { state.pending = false; renderLists(); renderDetail(); }
  function schedule() { if (!state.pending) { state.pending = true; setTimeout(render, 50); } }

  function select(kind, id) {
    state.selected = { kind: kind, id: id };
    if (kind === "run" && source.live) followRun(id);
    render();
  }
`
