#if Service
/// The viewer served at `/` (Specs/api.md §7): one static page, no build
/// step, that reads this node's projections through the API: a profile and
/// its gallery in order with the pictures themselves, the feed, the chats
/// (the open one updates live through `/v1/watch`), balances and the coin
/// audit. Text from the network is only ever set as text, never as HTML.
enum WebPage {
    /// The page's files: path, media type, content. They hold no data, so
    /// they are served without a credential.
    static let files = [
        ("/", "text/html; charset=utf-8", html), ("/app.js", "text/javascript; charset=utf-8", script), ("/app.css", "text/css; charset=utf-8", style),
    ]
    static let paths = Set(files.map(\.0))

    static let html = #"""
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Chorus node</title>
<link rel="stylesheet" href="/app.css">
</head>
<body>
<header><h1>Chorus node</h1><span>user <code id="me-user">…</code></span><span>device <code id="me-device">…</code></span><span>digest <code id="digest">…</code></span></header>
<nav id="tabs">
  <button data-tab="profile" class="active">Profile</button><button data-tab="feed">Feed</button>
  <button data-tab="chats">Chats</button><button data-tab="coins">Coins</button><button data-tab="log">Log</button>
</nav>
<main>
  <p id="error" class="error" role="alert"></p>
  <section id="profile" class="active">
    <form id="user-form"><label>User <input id="user" placeholder="64 hex digits (empty: this node's user)"></label> <button>Show</button></form>
    <h2>Profile</h2><table id="profile-fields"></table>
    <h2>Gallery</h2><div id="gallery" class="gallery"></div>
    <h2>Lock slots</h2><table id="slots"></table>
  </section>
  <section id="feed"><h2>Feed</h2><div id="feed-items" class="gallery"></div></section>
  <section id="chats">
    <div class="chats"><div class="chatlist"><h2>Chats</h2><ul id="chat-list"></ul></div>
    <div><h2 id="chat-title">No chat open</h2><p id="chat-members" class="muted"></p><div id="messages"></div></div></div>
  </section>
  <section id="coins"><h2>Balance</h2><table id="balance"></table><h2>Coin audit</h2><p id="conservation"></p><table id="audit"></table></section>
  <section id="log"><h2>Latest events</h2><table id="events"></table></section>
</main>
<script src="/app.js"></script>
</body>
</html>
"""#

    /// The page's style: a file of its own, as the policy allows no inline style.
    static let style = #"""
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #222; background: #f6f6f4; }
  header { background: #2d3142; color: #fff; padding: 10px 16px; display: flex; gap: 16px; align-items: baseline; flex-wrap: wrap; }
  header h1 { font-size: 18px; margin: 0; }
  code, .id { font-family: ui-monospace, monospace; font-size: 12px; }
  nav { display: flex; gap: 4px; padding: 8px 16px; background: #e4e4df; flex-wrap: wrap; }
  nav button { border: 0; background: none; padding: 6px 10px; cursor: pointer; border-radius: 4px; }
  nav button.active { background: #fff; font-weight: 600; }
  main { padding: 16px; max-width: 1000px; }
  section { display: none; } section.active { display: block; }
  table { border-collapse: collapse; margin: 8px 0; } td, th { text-align: left; padding: 3px 10px 3px 0; vertical-align: top; }
  .gallery { display: flex; flex-wrap: wrap; gap: 12px; }
  figure { margin: 0; background: #fff; padding: 6px; border-radius: 4px; width: 150px; }
  figure img { width: 150px; height: 110px; object-fit: contain; background: #ddd; image-rendering: pixelated; }
  figcaption { font-size: 12px; overflow-wrap: anywhere; }
  .chats { display: flex; gap: 16px; }
  .chatlist { min-width: 220px; } .chatlist li { cursor: pointer; } .chatlist li.open { font-weight: 600; }
  #messages { max-height: 60vh; overflow-y: auto; }
  .message { background: #fff; margin: 4px 0; padding: 6px 8px; border-radius: 4px; }
  .message .meta { color: #777; font-size: 12px; }
  .message img { max-width: 120px; max-height: 90px; display: block; image-rendering: pixelated; }
  .error { color: #b00020; } .muted { color: #777; }
  input { font-family: ui-monospace, monospace; width: 36em; max-width: 100%; }
"""#

    /// The page's script: a file of its own, as the policy allows no inline script.
    static let script = #"""
"use strict";
const $ = (id) => document.getElementById(id);
const short = (hex) => hex ? hex.slice(0, 16) : "-";
// Direction overrides and isolates in text from the network could make a
// name or message read as something else: shown as U+FFFD instead.
const plain = (text) => String(text).replace(/[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/g, "\uFFFD");
function el(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined && text !== null) e.textContent = plain(text); if (cls) e.className = cls; return e; }
// A user shown by name (the id on hover), once their profile is read.
const names = new Map();
function person(user) {
  const span = el("span", short(user)); span.title = user;
  if (!names.has(user)) names.set(user, get("/v1/profile?user=" + encodeURIComponent(user)).then((p) => p.fields && p.fields.name).catch(() => null));
  names.get(user).then((name) => { if (name) span.textContent = plain(name); });
  return span;
}
function row(table, cells) { const tr = el("tr"); for (const c of cells) { const td = el("td"); if (c instanceof Node) td.append(c); else td.textContent = c === null || c === undefined ? "-" : plain(c); tr.append(td); } table.append(tr); }
// The page's own credential (Specs/api.md §3.1): a short-lived session made
// from the API token, kept in this origin's sessionStorage (no other port or
// site can read it) and sent as a bearer token, never as a cookie. The token
// comes once in the fragment (/#token=...), which is never sent to a server.
const SESSION = "chorus_session";
async function startSession() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const query = new URLSearchParams(location.search);
  const token = fragment.get("token") || query.get("token");
  if (!token) return;
  fragment.delete("token"); query.delete("token");
  const q = query.toString(), f = fragment.toString();
  history.replaceState(null, "", location.pathname + (q ? "?" + q : "") + (f ? "#" + f : ""));
  const r = await fetch("/v1/session", { method: "POST", headers: { Authorization: "Bearer " + token } });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.message || "the token was refused");
  sessionStorage.setItem(SESSION, body.session);
}
function authorized(options) {
  const session = sessionStorage.getItem(SESSION);
  const headers = Object.assign({}, (options && options.headers) || {});
  if (session) headers.Authorization = "Bearer " + session;
  return Object.assign({}, options || {}, { headers });
}
async function get(path) {
  const r = await fetch(path, authorized());
  const body = await r.json().catch(() => ({ message: "not JSON" }));
  if (!r.ok && body && body.message) throw new Error(body.message);
  return body;
}
function showError(e) { $("error").textContent = e ? String(e.message || e) : ""; }
// Images are fetched with the session and shown from blob: URLs (an <img src>
// cannot carry a bearer token).
function image(picture) {
  const img = el("img"); img.alt = picture.caption || "picture";
  fetch("/v1/pictures/" + picture.id + "/bytes", authorized())
    .then((r) => { if (!r.ok) throw new Error("picture " + picture.id + ": HTTP " + r.status); return r.blob(); })
    .then((blob) => { img.src = URL.createObjectURL(blob); })
    .catch(showError);
  return img;
}
function figure(picture) {
  const f = el("figure"); f.dataset.picture = picture.id; f.append(image(picture), el("figcaption", picture.caption || short(picture.id))); return f;
}
let me = null;
async function loadProfile() {
  const user = $("user").value.trim();
  const q = user ? "?user=" + encodeURIComponent(user) : "";
  try {
    const [profile, pictures, slots] = await Promise.all([get("/v1/profile" + q), get("/v1/pictures" + q), get("/v1/slots" + q)]);
    const t = $("profile-fields"); t.replaceChildren(); row(t, ["user", el("code", profile.user)]);
    for (const [name, value] of Object.entries(profile.fields)) row(t, [name, value]);
    if (profile.avatar && profile.avatar.picture) row(t, ["avatar", image(profile.avatar.picture)]);
    row(t, ["devices", profile.devices.map((d) => (d.name || "device") + " (" + short(d.device) + ")" + (d.removed ? " removed" : "")).join(", ")]);
    $("gallery").replaceChildren(...pictures.map(figure));
    if (!pictures.length) $("gallery").append(el("p", "No pictures.", "muted"));
    const s = $("slots"); s.replaceChildren(); row(s, ["slot", "price", "state", "picture"]);
    for (const slot of slots) row(s, [slot.slot, slot.price, slot.unlocked ? "unlocked" : "locked", slot.picture && slot.picture.picture ? image(slot.picture.picture) : "-"]);
    showError(null);
  } catch (e) { showError(e); }
}
async function loadFeed() {
  try { const items = await get("/v1/feed"); $("feed-items").replaceChildren(...items.map(figure)); if (!items.length) $("feed-items").append(el("p", "Nothing from the users this node follows.", "muted")); }
  catch (e) { showError(e); }
}
let watching = null;
function renderChat(page) {
  $("chat-title").textContent = page.chat.title_state === "readable" ? (page.chat.title || "(untitled)") : "(encrypted: this device is not a member)";
  const members = $("chat-members"); members.replaceChildren();
  page.chat.members.forEach((m, i) => { if (i) members.append(", "); members.append(person(m.user)); if (m.admin) members.append(" (admin)"); });
  const box = $("messages");
  // Follow new messages when the reader is at the end (or on the first page).
  const atEnd = !box.children.length || box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  box.replaceChildren();
  for (const m of page.messages) {
    const div = el("div", null, "message"); div.dataset.message = m.id;
    const meta = el("div", null, "meta"); meta.append(person(m.sender), " · " + m.time); div.append(meta);
    if (m.deleted) div.append(el("div", "(deleted)", "muted"));
    else if (m.content !== "readable") div.append(el("div", "(encrypted: " + m.content + ")", "muted"));
    else div.append(el("div", m.text || "", "text"));
    if (m.picture && m.picture.picture) div.append(image(m.picture.picture));
    else if (m.picture) div.append(el("div", "picture " + m.picture.status, "muted"));
    box.append(div);
  }
  if (atEnd && box.lastElementChild) box.lastElementChild.scrollIntoView({ block: "end" });
}
// Reads server-sent events from a fetch (EventSource cannot send a bearer
// token): calls onEvent(name, data) for each event until aborted.
async function watch(path, signal, onEvent) {
  const r = await fetch("/v1/watch?path=" + encodeURIComponent(path), authorized({ signal }));
  if (!r.ok) { const body = await r.json().catch(() => ({})); throw new Error(body.message || "watch: HTTP " + r.status); }
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end); buffer = buffer.slice(end + 2);
      let name = "message", data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) name = line.slice(7);
        else if (line.startsWith("data: ")) data.push(line.slice(6));
      }
      if (data.length) onEvent(name, data.join("\n"));
    }
  }
}
function openChat(id) {
  if (watching) watching.abort();
  for (const li of document.querySelectorAll("#chat-list li")) li.classList.toggle("open", li.dataset.chat === id);
  // Live: the server pushes the page again whenever a commit changes it.
  const controller = new AbortController();
  watching = controller;
  watch("/v1/chats/" + id + "?limit=50", controller.signal, (name, data) => {
    if (name === "error") showError(JSON.parse(data).message);
    else { renderChat(JSON.parse(data)); showError(null); }
  }).catch((e) => { if (!controller.signal.aborted) showError(e); });
}
async function loadChats() {
  try {
    const chats = await get("/v1/chats");
    const list = $("chat-list"); list.replaceChildren();
    for (const c of chats) { const li = el("li", (c.title_state === "readable" ? c.title || "(untitled)" : "(encrypted)") + " · " + c.messages); li.dataset.chat = c.id; li.onclick = () => openChat(c.id); list.append(li); }
    if (!chats.length) list.append(el("li", "No chats.", "muted"));
  } catch (e) { showError(e); }
}
async function loadCoins() {
  try {
    const [balance, audit] = await Promise.all([get("/v1/balance"), get("/v1/audit")]);
    const b = $("balance"); b.replaceChildren(); row(b, ["total", balance.total]);
    for (const d of balance.devices) row(b, ["device " + d.name, d.rights]);
    $("conservation").textContent = "issued " + audit.issued + " = held " + audit.held + " + spent " + audit.spent + (audit.conserved ? "" : " VIOLATED");
    const a = $("audit"); a.replaceChildren(); row(a, ["kind", "amount", "from", "to", "receipt", "decision"]);
    for (const s of audit.steps) row(a, [s.kind, s.amount, short(s.from), short(s.to), s.receipt, s.decision]);
  } catch (e) { showError(e); }
}
async function loadLog() {
  try {
    const events = await get("/v1/log?limit=50&latest=true");
    const t = $("events"); t.replaceChildren(); row(t, ["arrival", "author", "seq", "kind", "object"]);
    for (const e of events) row(t, [e.arrival, person(e.author), e.seq, e.kind, short(e.object)]);
  } catch (e) { showError(e); }
}
const loaders = { profile: loadProfile, feed: loadFeed, chats: loadChats, coins: loadCoins, log: loadLog };
for (const b of document.querySelectorAll("#tabs button")) b.onclick = () => {
  for (const x of document.querySelectorAll("#tabs button")) x.classList.toggle("active", x === b);
  for (const s of document.querySelectorAll("main section")) s.classList.toggle("active", s.id === b.dataset.tab);
  loaders[b.dataset.tab]();
};
$("user-form").onsubmit = (e) => { e.preventDefault(); loadProfile(); };
(async () => {
  try {
    await startSession();
    me = await get("/v1/whoami"); $("me-user").textContent = me.user; $("me-device").textContent = short(me.device);
    const d = await get("/v1/digest"); $("digest").textContent = short(d.digest);
  } catch (e) { showError(e); }
  // ?user=…&chat=… open a user's profile or a chat directly (links, tests).
  const params = new URLSearchParams(location.search);
  if (params.get("user")) $("user").value = params.get("user");
  await loadProfile();
  if (params.get("chat")) { document.querySelector('#tabs button[data-tab="chats"]').click(); openChat(params.get("chat")); }
})();
"""#
}
#endif
