// The devtools page's script (GET /devtools, served as GET /devtools.js). A file of its own
// rather than inline, so the page's Content-Security-Policy allows no inline script
// (script-src 'self').
"use strict";
// Everything comes from the session's recording (GET .../recording: starting states and every
// change with its state), read when a session is opened and whenever the event stream starts
// over (a snapshot) or skips a change; in between, the stream's changes are appended to it. The
// stream (client.js, JSON Patch deltas on) gives every change with its whole state.
const $ = (id) => document.getElementById(id);
let session = null;      // {id, token}
let recording = null;    // the recording: the last one read, and the stream's changes after it
let stream = null;       // the client.js subscription
let selected = null;     // the selected seq
let timers = [];         // the session's pending timers (GET .../timers), due first
let timersRead = 0;      // counts reads, so an older answer never replaces a newer one
// For the browser console (and the tests): the subscription, and how many changes came as patches.
window.devtools = { get stream() { return stream; }, get recording() { return recording; }, get timers() { return timers; }, patched: 0 };

function status(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

async function call(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: Object.assign({ Authorization: "Bearer " + session.token }, body ? { "Content-Type": "application/json" } : {}),
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (e) { json = null; }
  return { status: response.status, json, text };
}

function base() { return "/v1/sessions/" + encodeURIComponent(session.id); }

// The state of each feature at `seq` (the starting states, then every change up to it).
function statesAt(seq) {
  const states = {};
  for (const start of recording.features) states[start.name] = { version: start.version, state: start.state };
  for (const change of recording.changes) {
    if (change.seq > seq) break;
    states[change.feature] = { version: change.version, state: change.state };
  }
  return states;
}

// A readable diff of two JSON values: one line per path that differs.
function diff(a, b, path, out) {
  if (JSON.stringify(a) === JSON.stringify(b)) return out;
  const objects = a && b && typeof a === "object" && typeof b === "object" && Array.isArray(a) === Array.isArray(b);
  if (!objects) {
    out.push((path || "/") + ": " + JSON.stringify(a) + " → " + JSON.stringify(b));
    return out;
  }
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  for (const key of keys) {
    const child = path + "/" + key;
    if (!(key in a)) out.push(child + ": added " + JSON.stringify(b[key]));
    else if (!(key in b)) out.push(child + ": removed " + JSON.stringify(a[key]));
    else diff(a[key], b[key], child, out);
  }
  return out;
}

function render() {
  const log = $("log");
  log.textContent = "";
  const options = ['<option value="0">0 (start)</option>'];
  for (const change of recording.changes) {
    const row = document.createElement("tr");
    row.className = "change" + (change.seq === selected ? " selected" : "");
    row.dataset.seq = change.seq;
    // A timer's change shows which timer fired, and how late (its due and actual times).
    const cause = change.timer ? "timer " + change.timer.id : change.cause;
    const cells = [change.seq, change.feature, change.version, cause,
      change.action ? JSON.stringify(change.action) : "—"];
    cells.forEach((text, index) => {
      const cell = document.createElement("td");
      cell.textContent = text;
      if (index === 4) cell.className = "action";
      row.appendChild(cell);
    });
    const travel = document.createElement("td");
    const button = document.createElement("button");
    button.className = "quiet travel";
    button.textContent = "Travel here";
    button.title = "Set " + change.feature + " to its state at version " + change.version + " (a new change)";
    button.addEventListener("click", (event) => { event.stopPropagation(); travelTo(change); });
    travel.appendChild(button);
    row.appendChild(travel);
    row.addEventListener("click", () => select(change.seq));
    log.appendChild(row);
    options.push('<option value="' + change.seq + '">' + change.seq + " (" + change.feature + " v" + change.version + ")</option>");
  }
  for (const id of ["diff-from", "diff-to"]) {
    const keep = $(id).value;
    $(id).innerHTML = options.join("");
    if (keep) $(id).value = keep;
  }
  if (!$("diff-to").value || $("diff-to").value === "0") $("diff-to").value = String(recording.changes.length ? recording.changes[recording.changes.length - 1].seq : 0);
  if (selected !== null) select(selected);
  const link = $("export");
  link.href = "data:application/json;charset=utf-8," + encodeURIComponent(JSON.stringify(recording, null, 1));
  link.download = "recording-" + session.id + ".json";
  link.hidden = false;
}

// "in 12 s" or "3 s late", from a due time in milliseconds since 1970.
function dueText(due) {
  const seconds = Math.round((due - Date.now()) / 1000);
  const when = new Date(due).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  return when + (seconds >= 0 ? " (in " + seconds + " s)" : " (" + -seconds + " s late)");
}

function renderTimers() {
  const body = $("timers");
  body.textContent = "";
  for (const timer of timers) {
    const row = document.createElement("tr");
    row.className = "timer";
    for (const [index, text] of [timer.id, timer.feature, JSON.stringify(timer.action), dueText(timer.due)].entries()) {
      const cell = document.createElement("td");
      cell.textContent = text;
      if (index === 2) cell.className = "action";
      row.appendChild(cell);
    }
    body.appendChild(row);
  }
  $("timers-status").textContent = timers.length ? timers.length + " pending" : "none";
}

// The pending timers change with the changes that schedule, cancel or fire them: read again
// after each.
async function readTimers() {
  const reading = session;
  const ticket = ++timersRead;
  const answer = await call("GET", base() + "/timers");
  if (session !== reading || ticket !== timersRead) return;
  if (answer.status !== 200) {
    $("timers-status").textContent = "cannot read the timers: " + (answer.json && answer.json.error ? answer.json.error.message : answer.status);
    return;
  }
  timers = answer.json.timers;
  renderTimers();
}

function select(seq) {
  selected = seq;
  for (const row of $("log").children) row.classList.toggle("selected", Number(row.dataset.seq) === seq);
  $("state").textContent = JSON.stringify(statesAt(seq), null, 2);
}

function lastSeq(of) {
  return of && of.changes.length ? of.changes[of.changes.length - 1].seq : 0;
}

function showLive() {
  status(recording.changes.length + " changes, live");
}

async function reload() {
  const reading = session;
  const answer = await call("GET", base() + "/recording");
  if (session !== reading) return false; // another session was opened meanwhile
  if (answer.status !== 200) {
    status("cannot read the session: " + (answer.json && answer.json.error ? answer.json.error.message : answer.status), true);
    return false;
  }
  // Changes sent as patches get their whole states back (every step shows its state).
  StateClient.wholeStates(answer.json);
  // Reads may overlap, and stream changes may have been appended meanwhile: keep the newest.
  if (!recording || lastSeq(answer.json) >= lastSeq(recording)) recording = answer.json;
  render();
  showLive();
  readTimers();
  return true;
}

// A change from the stream: appended when it follows the recording, read again after a gap.
function addChange(change) {
  if (change.patch !== undefined) window.devtools.patched++;
  if (!recording || change.seq <= lastSeq(recording)) return; // already there
  if (change.seq !== lastSeq(recording) + 1) { reload(); return; }
  const { seq, feature, version, cause, action, state, effect } = change;
  const entry = { seq, feature, version, cause, action, state, effect };
  if (change.timer) entry.timer = change.timer;
  recording.changes.push(entry);
  render();
  showLive();
  readTimers();
}

async function travelTo(change) {
  const answer = await call("POST", base() + "/state/" + encodeURIComponent(change.feature) + "/travel", { version: change.version });
  if (answer.status !== 200) status("travel refused: " + (answer.json && answer.json.error ? answer.json.error.message : answer.status), true);
  else await reload();
}

async function open() {
  session = { id: $("session-id").value.trim(), token: $("session-token").value.trim() };
  if (!session.id || !session.token) { status("give the session's id and a token", true); return; }
  if (stream) stream.close();
  stream = null;
  selected = null;
  recording = null;
  timers = [];
  renderTimers();
  if (!(await reload())) return;
  const client = new StateClient({ sessionId: session.id, token: session.token });
  stream = client.subscribe({
    // The first event, or a fresh start after a gap: read what the recording missed.
    onSnapshot(features, seq) { if (seq > lastSeq(recording)) reload(); },
    onChange: addChange,
    onStatus(state) {
      if (state === "reconnecting") status("the event stream was interrupted; reconnecting", false);
      else if (state === "open" && recording) showLive();
    },
    onError(error) { status("the event stream: " + error.message, error.fatal); },
  });
}

async function dispatch() {
  let action;
  try { action = JSON.parse($("action").value); } catch (e) { $("dispatch-result").textContent = "not JSON: " + e.message; return; }
  const answer = await call("POST", base() + "/dispatch", { feature: $("feature").value, action });
  $("dispatch-result").textContent = answer.status + " " + answer.text;
  if (answer.status === 200) await reload();
}

$("open").addEventListener("click", open);
setInterval(() => { if (timers.length) renderTimers(); }, 1000); // the "in N s" counts down
$("dispatch").addEventListener("click", dispatch);
$("diff").addEventListener("click", () => {
  const from = statesAt(Number($("diff-from").value));
  const to = statesAt(Number($("diff-to").value));
  const lines = [];
  for (const name of Object.keys(to)) diff(from[name] && from[name].state, to[name].state, "/" + name, lines);
  $("diff-result").textContent = lines.length ? lines.join("\n") : "no difference";
});
fetch("/v1/features").then((r) => r.json()).then((body) => {
  $("feature").innerHTML = body.features.map((f) => '<option value="' + f.name + '">' + f.name + "</option>").join("");
});
const fromURL = new URLSearchParams(location.hash.slice(1));
if (fromURL.get("session")) $("session-id").value = fromURL.get("session");
