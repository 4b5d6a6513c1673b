// The page of tpnode-tui web: it lays out the words the server made, as they come.
//
// Every word is the server's (tpnode_tui/web/page.py words them as the dashboard
// does); this script only places each one as text (textContent, never markup),
// and counts the time since, or until, a moment it is given, so "up 3m05s"
// moves on between messages. It follows /events (Server-Sent Events) and
// reconnects by itself, saying "reconnecting" while the server is away.
"use strict";

(function () {
  const RETRY_MS = 2000;

  let page = null;
  let takenAt = null;
  let offset = 0; // the server's clock minus this browser's, in seconds
  let away = null; // since when the server has not answered (this browser's time), or null
  let ticking = []; // [element, line] pairs whose words move with time

  const byId = (id) => document.getElementById(id);
  const now = () => Date.now() / 1000 + offset;

  function pad(n) {
    return n < 10 ? "0" + n : String(n);
  }

  // As tpnode_tui.text.render.format_duration says it: 45s, 3m05s, 2h03m, 1d02h.
  function duration(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + pad(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + pad(Math.floor((s % 3600) / 60)) + "m";
    return Math.floor(s / 86400) + "d" + pad(Math.floor((s % 86400) / 3600)) + "h";
  }

  // A line's words: plain text, or words around the time since (or until) a moment.
  function words(line) {
    if (line.since !== undefined && line.since !== null) {
      const d = now() - line.since;
      if (line.soon && d < line.soon) return line.before + "just now";
      return line.before + duration(d) + (line.after || "");
    }
    if (line.until !== undefined && line.until !== null) {
      const d = line.until - now();
      return d > 0 ? line.before + duration(d) + (line.after || "") : line.past;
    }
    return line.text;
  }

  function el(tag, className, text) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }

  function lineEl(line, tag, className) {
    const e = el(tag || "div", ((className || "line") + " " + (line.kind || "")).trim(), words(line));
    if (line.since !== undefined || line.until !== undefined) ticking.push([e, line]);
    return e;
  }

  // A state's badge: its symbol and its word on its colour, so it reads without the colour.
  function badgeEl(mark) {
    const b = el("span", "badge", mark.symbol + " " + mark.badge);
    b.style.backgroundColor = mark.colour;
    if (mark.meaning) b.title = mark.meaning;
    return b;
  }

  function tick() {
    for (const [e, line] of ticking) e.textContent = words(line);
    const age = byId("age");
    if (page && takenAt !== null && page.header) {
      age.textContent = words({ before: page.header.age + " ", since: takenAt, after: " ago", soon: 1 });
    } else if (page && page.kind === "fleet" && takenAt !== null) {
      age.textContent = words({ before: "read ", since: takenAt, after: " ago", soon: 1 });
    } else {
      age.textContent = "";
    }
    if (away !== null) {
      const gone = duration(Date.now() / 1000 - away);
      byId("connection").textContent =
        "reconnecting… this page's server has not answered for " + gone + ": what is shown may be out of date";
    }
  }

  // ── a node ────────────────────────────────────────────────────────────────

  function memoryEl(card) {
    const m = el("div", "memory");
    const bar = el("div", "bar");
    if (card.memory_share !== null) {
      const fill = el("div", "fill");
      fill.style.width = (100 * card.memory_share).toFixed(1) + "%";
      if (card.memory_share >= 0.9) fill.classList.add("high");
      else if (card.memory_share >= 0.5) fill.classList.add("mid");
      bar.appendChild(fill);
    } else {
      bar.classList.add("unknown");
    }
    m.append(bar, el("span", "memory-words", card.memory));
    return m;
  }

  function sliceEl(piece) {
    const li = el("li", "slice");
    li.append(badgeEl(piece), el("span", "slice-name", piece.name + " " + piece.profile));
    if (piece.who) li.append(el("span", "slice-who", piece.who));
    return li;
  }

  function tileEl(card) {
    const tile = el("article", "tile");
    tile.dataset.index = String(card.index);
    tile.dataset.state = card.state;
    tile.setAttribute("aria-label", "card " + card.index + ": " + card.badge);
    const head = el("div", "tile-head");
    head.append(el("span", "index", String(card.index)), badgeEl(card));
    if (card.unused) head.appendChild(lineEl(card.unused, "span", "unused"));
    tile.appendChild(head);
    if (card.who) tile.appendChild(el("div", "who", card.who));
    if (card.runs) tile.appendChild(el("div", "runs", card.runs));
    tile.appendChild(memoryEl(card));
    if (card.readings) tile.appendChild(el("div", "readings", card.readings));
    if (card.slices.length) {
      const list = el("ul", "slices");
      for (const piece of card.slices) list.appendChild(sliceEl(piece));
      tile.appendChild(list);
    }
    for (const note of card.notes) tile.appendChild(lineEl(note, "div", "note"));
    return tile;
  }

  function tableEl(head, rows, className) {
    const wrap = el("div", "table-wrap");
    const table = el("table", className);
    const tr = el("tr");
    for (const h of head) tr.appendChild(el("th", "", h));
    const thead = el("thead");
    thead.appendChild(tr);
    const tbody = el("tbody");
    for (const row of rows) {
      const r = el("tr", row.className || "");
      for (const cell of row.cells || row) r.appendChild(el("td", "", cell));
      tbody.appendChild(r);
    }
    table.append(thead, tbody);
    wrap.appendChild(table);
    return wrap;
  }

  function renderUsage(usage) {
    const box = byId("usage");
    box.replaceChildren(el("h2", "", "Who used the cards"));
    if (usage.problem) {
      box.appendChild(el("p", "quiet", usage.problem));
      return;
    }
    let notes = [];
    for (const span of usage.spans) {
      box.appendChild(el("h3", "", span.title));
      const rows = span.rows.concat([{ cells: span.total, className: "total" }]);
      box.appendChild(tableEl(span.head, rows, "figures"));
      notes = span.notes;
    }
    for (const note of notes) box.appendChild(el("p", "quiet", note));
  }

  function renderReservations(rows) {
    const box = byId("reservations");
    box.replaceChildren();
    if (!rows.length) return;
    box.appendChild(el("h2", "", "Reservations running"));
    const head = ["run id", "owner", "holds", "until", "idle so far"];
    box.appendChild(tableEl(head, rows.map((r) => [r.run_id, r.owner, r.holds, r.until, r.idle]), "reserved"));
  }

  function renderLegend(marks) {
    const box = byId("legend");
    box.replaceChildren();
    for (const mark of marks || []) {
      const item = el("span", "legend-item");
      item.append(badgeEl(mark), el("span", "quiet meaning", mark.meaning || "not known now"));
      box.appendChild(item);
    }
  }

  function renderNode(p) {
    const h = p.header;
    document.title = (h ? h.host + " · " : "") + "tpnode-tui";
    byId("where").textContent = h ? h.host : "reading the node…";
    byId("free").textContent = h ? h.free : "";
    byId("about").textContent = h ? h.about : "";
    byId("served").textContent = h ? "· " + h.served : "";
    byId("summary").replaceChildren(...p.summary.map((line) => lineEl(line, "p", "line")));
    byId("cards").replaceChildren(...p.cards.map(tileEl));
    byId("nodes").replaceChildren();
    renderLegend(p.legend);
    renderReservations(p.reservations);
    renderUsage(p.usage);
  }

  // ── the fleet ─────────────────────────────────────────────────────────────

  function nodeEl(node) {
    const box = el("article", "node");
    box.dataset.name = node.name;
    box.dataset.status = node.status;
    const head = el("div", "node-head");
    head.append(el("span", "node-name", node.name), badgeEl(node), lineEl(node.seen, "span", "seen"));
    box.appendChild(head);
    box.appendChild(el("div", "quiet", node.series));
    const strip = el("div", "strip");
    for (const card of node.cards) {
      const cell = el("span", "cell", card.symbol);
      cell.style.backgroundColor = card.colour;
      cell.title = "card " + card.index + ": " + card.badge;
      cell.setAttribute("aria-label", cell.title);
      strip.appendChild(cell);
    }
    if (!node.cards.length) strip.appendChild(el("span", "quiet", "no cards known"));
    box.appendChild(strip);
    const counts =
      "free " + node.free + " · window " + node.window + " · unhealthy " + node.unhealthy +
      " · drained " + node.drained + " · intruded " + node.intruded;
    box.appendChild(el("div", "counts", counts));
    if (node.problem) box.appendChild(el("div", "note " + (node.status === "up" ? "warning" : "error"), node.problem));
    if (node.dashboard) box.appendChild(el("code", "dashboard", node.dashboard));
    return box;
  }

  function renderFleet(p) {
    document.title = "fleet · tpnode-tui";
    byId("where").textContent = "fleet · " + p.where;
    byId("free").textContent = "";
    byId("about").textContent = "";
    byId("served").textContent = "";
    const summary = [];
    if (p.summary) summary.push(el("p", "line", p.summary));
    for (const problem of p.problems) summary.push(el("p", "line warning", problem));
    byId("summary").replaceChildren(...summary);
    byId("cards").replaceChildren();
    byId("nodes").replaceChildren(...p.nodes.map(nodeEl));
    renderLegend(p.legend);
    byId("reservations").replaceChildren();
    byId("usage").replaceChildren();
  }

  // ── both ──────────────────────────────────────────────────────────────────

  function renderBanners(p) {
    const banners = p.kind === "fleet" ? (p.banner ? [{ kind: "stale", text: p.banner }] : []) : p.banners;
    byId("banners").replaceChildren(
      ...banners.map((b) => {
        const box = el("div", "banner " + b.kind, "⚠ " + b.text);
        box.setAttribute("role", "alert");
        return box;
      })
    );
  }

  function render() {
    ticking = [];
    renderBanners(page);
    document.body.classList.toggle("stale", page.kind === "node" && page.banners.some((b) => b.kind !== "blind"));
    if (page.kind === "fleet") renderFleet(page);
    else renderNode(page);
    tick();
  }

  function online(data) {
    offset = data.now - Date.now() / 1000;
    takenAt = data.taken_at;
    if (away !== null) {
      away = null;
      byId("connection").hidden = true;
      document.body.classList.remove("away");
    }
  }

  function offline() {
    if (away === null) away = Date.now() / 1000;
    byId("connection").hidden = false;
    document.body.classList.add("away");
    tick();
  }

  let source = null;

  function connect() {
    source = new EventSource("events");
    source.addEventListener("page", (e) => {
      const data = JSON.parse(e.data);
      page = data.page;
      online(data);
      render();
    });
    source.addEventListener("fresh", (e) => {
      online(JSON.parse(e.data));
      tick();
    });
    source.onerror = () => {
      offline();
      if (source.readyState === EventSource.CLOSED) {
        // refused outright (a server that came back answering something else): ask again later
        source.close();
        setTimeout(connect, RETRY_MS);
      }
    };
  }

  // for the tests: the duration as this page writes it, to hold beside the server's
  window.tpnodeDuration = duration;
  setInterval(tick, 1000);
  connect();
})();
