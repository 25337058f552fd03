// The seckill operator console. It holds nothing without the admin token: everything comes
// from the admin endpoints, the live figures from GET /v1/admin/console/events once a second.
"use strict";

const KEY = "seckill-admin-token";
const HISTORY = 300; // points kept per chart: five minutes
// The api sends a snapshot a second: a stream with none for this long is given up (its api's
// host gone without a reset, a partition, a proxy holding it) and opened again.
const SILENCE = 10000;
const $ = (sel) => document.querySelector(sel);

let token = "";
let stream = null; // AbortController of the running stream
let lastOrder = "";

const hist = { t: [], purchases: {}, p99: [], lag: [], persisted: [] };
const outcomes = ["accepted", "sold_out", "limit", "rate_limited", "unavailable"];
const colors = { accepted: "#1e8e3e", sold_out: "#6b7385", limit: "#e67e22", rate_limited: "#8e44ad", unavailable: "#c0392b",
  p99: "#2457d6", lag: "#c0392b", persisted: "#1e8e3e" };

function signIn(t) {
  // A token fetch cannot send (a link cut short in an escape gives U+FFFD) would have connect
  // retry it forever behind an empty page: it is refused here, as the api would.
  try {
    new Headers({ Authorization: "Bearer " + t });
  } catch {
    signOut("that is not a token: sign in with the admin token");
    return;
  }
  token = t;
  sessionStorage.setItem(KEY, t);
  $("#signin").classList.add("hidden");
  $("#app").classList.remove("hidden");
  $("#signout").classList.remove("hidden");
  connect();
}

function signOut(message) {
  token = "";
  sessionStorage.removeItem(KEY);
  if (stream) stream.abort();
  $("#app").classList.add("hidden");
  $("#signout").classList.add("hidden");
  $("#signin").classList.remove("hidden");
  setConn(false, message || "signed out");
}

function setConn(on, text) {
  const c = $("#conn");
  c.textContent = text;
  c.className = "conn " + (on ? "on" : "off");
}

function say(text, error) {
  const s = $("#status");
  s.textContent = text;
  s.className = error ? "error" : "";
}

// api calls an admin endpoint and returns its JSON; an error answer throws its message, with
// status (0: no answer) and answered (the api said what became of the request: its error body;
// not a proxy's page, nor a connection lost).
async function api(method, path, body) {
  const init = { method, headers: { Authorization: "Bearer " + token } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    throw Object.assign(new Error(e.message), { status: 0, answered: false });
  }
  const data = await resp.json().catch(() => ({}));
  if (resp.status === 401) signOut("the token was refused");
  if (!resp.ok) {
    const answered = !!(data.error && data.error.message);
    throw Object.assign(new Error(answered ? data.error.message : resp.status + " " + resp.statusText), { status: resp.status, answered });
  }
  return data;
}

// outcome says what became of a control that threw e. Only a refusal (4xx) is a failure: a 503
// may come after the change was made (its message says so), and with no answer from the api
// the change may have been made too; "failed" would have the operator send an add again.
function outcome(e) {
  if (!e.answered) return ": no answer from the api (" + e.message + "); it may have been done: look at the campaign before sending it again";
  if (e.status >= 500) return ": " + e.message;
  return " failed: " + e.message;
}

// connect reads the snapshot stream, and reconnects with backoff when it ends.
async function connect() {
  if (stream) stream.abort();
  const ctl = new AbortController();
  stream = ctl;
  let backoff = 500;
  while (token && !ctl.signal.aborted) {
    let why = "the stream ended"; // said beside "reconnecting", so the operator knows what is down
    const attempt = new AbortController();
    const stop = () => attempt.abort();
    ctl.signal.addEventListener("abort", stop);
    let silent = false;
    let timer;
    const watch = () => {
      clearTimeout(timer);
      timer = setTimeout(() => { silent = true; attempt.abort(); }, SILENCE);
    };
    watch();
    try {
      const resp = await fetch("/v1/admin/console/events", { headers: { Authorization: "Bearer " + token }, signal: attempt.signal });
      if (resp.status === 401) { signOut("the token was refused"); return; }
      if (!resp.ok) {
        const data = await resp.json().catch(() => ({}));
        throw new Error(resp.status + " " + ((data.error && data.error.message) || resp.statusText));
      }
      setConn(true, "live");
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let end;
        while ((end = buf.indexOf("\n\n")) >= 0) {
          const event = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const data = event.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
          if (data) {
            render(JSON.parse(data));
            // Back to the shortest wait only once a snapshot came: a stream that ends as it
            // opens (an api draining) is not opened again twice a second.
            backoff = 500;
            watch();
          }
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
      why = silent ? "no snapshot for " + SILENCE / 1000 + " s" : e.message;
    } finally {
      clearTimeout(timer);
      ctl.signal.removeEventListener("abort", stop);
    }
    setConn(false, "reconnecting… (" + why + ")");
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 10000);
  }
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function num(tr, name, v) {
  const td = cell(tr, "", "n " + name);
  setNum(td, v);
  return td;
}

// setNum and setText touch a cell only when its figure changed.
function setNum(td, v) {
  if (td.dataset.value === String(v)) return;
  td.dataset.value = v;
  td.textContent = Number(v).toLocaleString();
}

function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

function button(td, label, onClick, cls) {
  const b = document.createElement("button");
  b.textContent = label;
  b.dataset.action = label.toLowerCase();
  if (cls) b.className = cls;
  b.addEventListener("click", onClick);
  td.appendChild(b);
}

function when(t) { return t ? new Date(t).toLocaleString() : "no end"; }

const figures = ["stock", "remaining", "pending", "confirmed", "paid", "refunded"];
const rows = new Map(); // campaign id -> its row and cells, kept from one snapshot to the next

// campaignRow updates the campaign's row in place, so that a button keeps being the same
// element from one snapshot to the next: a click (press and release) that spans a snapshot
// still lands. Its buttons change only with its state.
function campaignRow(c) {
  let r = rows.get(c.id);
  if (!r) {
    const tr = document.createElement("tr");
    tr.dataset.campaign = c.id;
    cell(tr, c.id);
    r = { tr, name: cell(tr, ""), badge: document.createElement("span"), nums: {} };
    cell(tr, "").appendChild(r.badge);
    for (const f of figures) r.nums[f] = num(tr, f, c[f]);
    r.window = cell(tr, "");
    r.audit = cell(tr, "");
    r.actions = cell(tr, "");
    rows.set(c.id, r);
  }
  setText(r.name, c.name);
  for (const f of figures) setNum(r.nums[f], c[f]);
  setText(r.window, when(c.starts_at) + " → " + when(c.ends_at));
  setText(r.audit, c.audit ? (c.audit.ok ? "ok" : "VIOLATION") : "—");
  r.audit.className = c.audit ? (c.audit.ok ? "audit-ok" : "audit-bad") : "";
  r.audit.title = c.audit ? (c.audit.violations || "every invariant held") + " · " + new Date(c.audit.at_ms).toLocaleString() : "";
  if (r.tr.dataset.state !== c.state) {
    r.tr.dataset.state = c.state;
    r.badge.className = "state " + c.state;
    r.badge.textContent = c.state.replace("_", " ");
    actions(r.actions, c);
  }
  return r.tr;
}

// answer reads a prompt's answer as a whole number from 1 up, or says why not and returns null
// (null too when the operator cancelled). Number gives NaN for words, which Date throws on and
// JSON sends as null.
function answer(what, text) {
  if (text === null || text.trim() === "") return null;
  const n = Number(text.trim());
  if (Number.isSafeInteger(n) && n >= 1) return n;
  say(what + ": " + JSON.stringify(text) + " is not a whole number from 1 up", true);
  return null;
}

function actions(td, c) {
  td.replaceChildren();
  if (c.state === "cancelled") return;
  if (c.state !== "ended") button(td, "Close", () => control(c.id, "close"));
  button(td, "Extend", () => {
    const m = answer(c.id + ": extend", prompt("Minutes from now until the sale ends:", "30"));
    if (m === null) return;
    const ends = new Date(Date.now() + m * 60000);
    if (isNaN(ends)) say(c.id + ": extend: " + m + " minutes is past the last date a browser can name", true);
    else control(c.id, "extend", { ends_at: ends.toISOString() });
  });
  button(td, "Add stock", () => {
    const n = answer(c.id + ": add stock", prompt("Units to put on sale:", "100"));
    if (n !== null) control(c.id, "stock", { add: n });
  });
  button(td, "Cancel", () => {
    if (confirm("Cancel " + c.id + "? Every pending reservation is released and every confirmed or paid order refunded.")) cancel(c.id);
  }, "danger");
}

function render(snap) {
  const body = $("#campaigns tbody");
  const seen = new Set();
  (snap.campaigns || []).forEach((c, i) => {
    seen.add(c.id);
    const tr = campaignRow(c);
    if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null);
  });
  for (const [id, r] of rows) {
    if (!seen.has(id)) {
      r.tr.remove();
      rows.delete(id);
    }
  }
  $("#campaigns").dataset.at = snap.at;
  // The store cannot be read: the last rows read stay, marked with when they were read.
  $("#campaigns").classList.toggle("stale", !!snap.campaigns_as_of);
  setText($("#campaigns-as-of"), snap.campaigns_as_of ? "stale: as of " + new Date(snap.campaigns_as_of).toLocaleTimeString() : "");

  hist.t.push(new Date(snap.at));
  for (const o of outcomes) (hist.purchases[o] = hist.purchases[o] || []).push((snap.purchases || {})[o] || 0);
  hist.p99.push(snap.p99_ms || 0);
  // -1: Kafka did not answer. null leaves a gap: drawn as 0, the lag fell to none in the very
  // outage that makes it grow.
  hist.lag.push(snap.consumer_lag >= 0 ? snap.consumer_lag : null);
  hist.persisted.push(snap.persisted_per_sec >= 0 ? snap.persisted_per_sec : null);
  if (hist.t.length > HISTORY) {
    hist.t.shift();
    for (const o of outcomes) hist.purchases[o].shift();
    hist.p99.shift(); hist.lag.shift(); hist.persisted.shift();
  }
  chart($("#chart-purchases"), outcomes.map((o) => ({ name: o, color: colors[o], values: hist.purchases[o] })), $("#legend-purchases"));
  chart($("#chart-latency"), [{ name: "p99", color: colors.p99, values: hist.p99 }]);
  chart($("#chart-consumer"), [{ name: "lag (events)", color: colors.lag, values: hist.lag },
    { name: "persisted/s", color: colors.persisted, values: hist.persisted }], $("#legend-consumer"));
  counts($("#dead-letters tbody"), snap.dead_letters, "no dead letters");
  counts($("#compensations tbody"), snap.compensations, "none given back");
  counts($("#giving-back tbody"), snap.giving_back, "none");
  // A line of its own: on the control's line, the next snapshot would put it over the
  // control's answer, in the incident the operator used the control for.
  setText($("#missing"), snap.errors && snap.errors.length ? "some figures are missing: " + snap.errors.join("; ") : "");
}

function counts(body, m, empty) {
  body.replaceChildren();
  const keys = Object.keys(m || {}).sort();
  if (!keys.length) {
    const tr = document.createElement("tr");
    cell(tr, empty);
    body.appendChild(tr);
  }
  for (const k of keys) {
    const tr = document.createElement("tr");
    tr.dataset.key = k;
    cell(tr, k);
    num(tr, "count", m[k]);
    body.appendChild(tr);
  }
}

// chart draws series as lines on a canvas, scaled to the largest value, with a gap at each null
// (unknown); data-max on the canvas holds the largest value drawn so far and data-last each
// series' last value (the browser tests read them).
function chart(canvas, series, legend) {
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, pad = 28;
  ctx.clearRect(0, 0, w, h);
  let top = 1;
  for (const s of series) for (const v of s.values) top = Math.max(top, v);
  canvas.dataset.max = Math.max(Number(canvas.dataset.max || 0), ...series.map((s) => Math.max(0, ...s.values)));
  canvas.dataset.last = series.map((s) => {
    const v = s.values[s.values.length - 1];
    return v === null ? "unknown" : v || 0;
  }).join(",");
  ctx.strokeStyle = "#e3e6ec";
  ctx.fillStyle = "#6b7385";
  ctx.font = "11px system-ui";
  for (let i = 0; i <= 4; i++) {
    const y = h - pad / 2 - (i * (h - pad)) / 4;
    ctx.beginPath(); ctx.moveTo(pad, y); ctx.lineTo(w, y); ctx.stroke();
    ctx.fillText(short((top * i) / 4), 0, y + 4);
  }
  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    const n = s.values.length; // the newest point at the right edge, older ones leftwards
    let drawing = false;
    s.values.forEach((v, i) => {
      if (v === null) {
        drawing = false;
        return;
      }
      const x = w - ((w - pad) * (n - 1 - i)) / (HISTORY - 1);
      const y = h - pad / 2 - (v / top) * (h - pad);
      if (drawing) ctx.lineTo(x, y); else ctx.moveTo(x, y);
      drawing = true;
    });
    ctx.stroke();
  }
  if (legend && !legend.childElementCount) {
    for (const s of series) {
      const span = document.createElement("span");
      const swatch = document.createElement("i");
      swatch.style.background = s.color;
      span.append(swatch, s.name);
      legend.appendChild(span);
    }
  }
}

function short(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return v >= 10 ? v.toFixed(0) : v.toFixed(1);
}

async function control(id, action, body) {
  // Said at once: the last control's answer, left up while this one runs (seconds, with a
  // dependency slow), would read as this one's.
  say(id + ": " + action + "…");
  try {
    const c = await api("POST", "/v1/admin/campaigns/" + encodeURIComponent(id) + "/" + action, body);
    say(id + ": " + action + " done; now " + c.state.replace("_", " ") + ", " + c.remaining + " of " + c.stock + " remaining");
  } catch (e) {
    say(id + ": " + action + outcome(e), true);
  }
}

async function cancel(id) {
  say("cancelling " + id + "… (pending and confirmed fall as it goes)");
  try {
    const r = await api("POST", "/v1/admin/campaigns/" + encodeURIComponent(id) + "/cancel");
    say(id + " cancelled: " + r.released + " reservations released, " + r.refunded + " orders refunded, " + r.unchanged + " unchanged");
  } catch (e) {
    // The api goes on with a cancel whose answer is lost: the row shows it go on.
    say("cancel " + id + outcome(e) + " (run it again to finish)", true);
  }
}

function init() {
  // URLSearchParams, not decodeURIComponent: a link cut short in the middle of an escape
  // ("%E0%A4%A") must not throw here, before the sign-in form has its handler.
  const linked = new URLSearchParams(location.hash.slice(1)).get("token");
  if (linked !== null) {
    sessionStorage.setItem(KEY, linked);
    window.history.replaceState(null, "", location.pathname); // the token leaves the address bar
  }
  $("#signin-form").addEventListener("submit", (e) => { e.preventDefault(); signIn($("#token").value.trim()); });
  $("#signout").addEventListener("click", () => signOut());
  $("#create-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    const body = { name: f.get("name"), stock: Number(f.get("stock")), per_user_limit: Number(f.get("per_user_limit")) };
    if (f.get("id")) body.id = f.get("id");
    if (f.get("minutes")) {
      const ends = new Date(Date.now() + Number(f.get("minutes")) * 60000);
      if (isNaN(ends)) return say("create: " + f.get("minutes") + " minutes is past the last date a browser can name", true);
      body.ends_at = ends.toISOString();
    }
    if (f.get("payment_window_seconds")) body.payment_window_seconds = Number(f.get("payment_window_seconds"));
    say("creating campaign " + (body.id || body.name) + "…");
    try {
      const c = await api("POST", "/v1/campaigns", body);
      say("campaign " + c.id + " created, " + c.state.replace("_", " "));
      e.target.reset();
    } catch (err) {
      say("create" + outcome(err), true); // a 503 may say it was created
    }
  });
  $("#order-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    lastOrder = new FormData(e.target).get("id").trim();
    try {
      $("#order").textContent = JSON.stringify(await api("GET", "/v1/admin/orders/" + encodeURIComponent(lastOrder)), null, 2);
      $("#order-compensate").disabled = false;
    } catch (err) {
      $("#order").textContent = err.message;
      $("#order-compensate").disabled = true;
    }
  });
  $("#order-compensate").addEventListener("click", async () => {
    if (!confirm("Compensate " + lastOrder + "? A pending order is released, a confirmed or paid one refunded.")) return;
    $("#order").textContent = "compensating " + lastOrder + "…";
    try {
      $("#order").textContent = JSON.stringify(await api("POST", "/v1/admin/orders/" + encodeURIComponent(lastOrder) + "/compensate"), null, 2);
    } catch (err) {
      $("#order").textContent = err.message;
    }
  });
  const saved = sessionStorage.getItem(KEY);
  if (saved) signIn(saved);
}

init();
