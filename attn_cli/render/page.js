// attn's interactive page: every head at a glance, one head in detail (bertviz's head view and a heatmap).
// Self-contained: the data is the JSON in <script id="attn-data">; nothing is fetched.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("attn-data").textContent);
  const tokens = data.tokens;
  const app = document.getElementById("app");
  const SVG = "http://www.w3.org/2000/svg";
  const state = { layer: data.start[0], head: data.start[1], focus: null, locked: false };

  // -- colours: the terminal's scales (render/scale.py) --------------------------------------------
  const SEQ = data.scale.weights.map(hexToRgb);
  const NEG = data.scale.negative.map(hexToRgb);
  const POS = data.scale.positive.map(hexToRgb);
  function hexToRgb(h) { return [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16)); }
  function interpolate(stops, t) {
    t = Math.min(1, Math.max(0, t));
    const p = t * (stops.length - 1), i = Math.min(Math.floor(p), stops.length - 2), f = p - i;
    return stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * f));
  }
  // span: a head's own range where it has one ({low, limit}): a norms head 0 → its largest, a weights head
  // with --scale head its smallest → largest; else the run's (weights 0 → 1)
  function rgbOf(run, v, span) {
    if (run.kind === "scores") return interpolate(v >= 0 ? POS : NEG, Math.abs(v) / (run.limit || 1));
    const low = (span && span.low) || 0, high = (span && span.limit) || run.limit || 1;
    return interpolate(SEQ, (v - low) / ((high - low) || 1));
  }
  // the legend under a run's heading: which colour scale, and its range (the terminal's legend, in words)
  function num(v) { return Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2); }
  // what one matrix of a run is: a head (the default), or the whole matrix over layers (rollout, attribute)
  const UNIT = data.unit || "head";
  function legendText(run, s) {
    if (run.kind === "scores") return "−" + num(run.limit || 1) + " → 0 → " + num(run.limit || 1) + ": centred on 0, brighter = further from 0";
    if (run.perHead) return num(s.low || 0) + " → " + num(s.limit || 1) + ": per-" + UNIT + " scale, this " + UNIT + "'s min → max (--scale head)";
    if (run.kind === "norms") return "0 → " + num(s.limit || 1) + ": this " + UNIT + "'s own largest";
    const shared = UNIT === "head" ? ", the same for every head" : data.runs.length > 1 ? ", the same for every " + UNIT : "";
    return "0 → " + num(run.limit || 1) + ": fixed scale" + shared;
  }
  function legend(view, s) {
    const box = el("div", { class: "legend" }, view.body);
    const stops = view.run.kind === "scores" ? NEG.slice().reverse().concat(POS.slice(1)) : SEQ;
    el("span", { class: "legend-bar", style: "background:linear-gradient(to right," + stops.map(css).join(",") + ")" }, box);
    el("span", {}, box, " " + noun(view.run) + legendText(view.run, s) + (s.sink ? " · " + SINK + ": " + SINK_NOTE : ""));
  }
  const NOUN = { weights: "weight ", scores: "score ", norms: "norm " };
  function css(rgb) { return "rgb(" + rgb.join(",") + ")"; }
  function inkOn(rgb) { return (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255 > 0.45 ? "#000" : "#fff"; }
  // as the terminal writes a weight in a cell: 0, .40, 1.00; a norm (limit: its head's largest): 0, .42, 1.51
  function cellText(v, limit) {
    if (limit !== undefined) return v < 0.005 ? "0" : v.toFixed(2).replace(/^0/, "");
    return v < 0.005 ? "0" : v >= 0.995 ? "1.00" : v.toFixed(2).replace(/^0/, "");
  }
  // a score run whose values are all under 1 in size (a weight change, B − A): two decimals, '-.13', as the terminal
  function scoreText(run, v) {
    if (run.limit >= 0.995) { const one = v.toFixed(1); return +one === 0 ? "0" : one; }  // never "-0.0"
    const t = v.toFixed(2);
    return +t === 0 ? "0" : t.replace(/^(-?)0\./, "$1.");
  }
  // a run's row and column labels: its own (heads: L0 …, h0 …; diff: A's or B's tokens), else the page's tokens
  function rowTok(run) { return run.rowTokens || tokens; }
  function colTok(run) { return run.colTokens || run.rowTokens || tokens; }
  function noun(run) { return run.noun || NOUN[run.kind]; }
  const SINK = "⟨sink⟩";  // a learned sink logit's column of the softmax: not a key of the text
  const SINK_NOTE = "the learned sink logit's share; each row sums to 1 with it";
  function fmt(v) { return v === null || v === undefined ? "masked" : (Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(2)); }

  function el(tag, attrs, parent, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }
  function sv(tag, attrs, parent, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }
  function findHead(run, layer, head) {
    const entry = run.layers.find((l) => l.layer === layer);
    return entry ? entry.heads.find((h) => h.head === head) : undefined;
  }
  function spans(h) {
    const m = h.m || [];
    const rows = h.rows || [0, m.length], cols = h.cols || [0, m.length ? m[0].length : 0];
    // sink: a learned sink's share of each row (the ⟨sink⟩ column after the keys), where the head has one
    return { r0: rows[0], c0: cols[0], m: m, limit: h.limit, low: h.low, sink: h.sink };
  }

  // -- controls ----------------------------------------------------------------------------------
  const first = data.runs[0];
  const controls = el("div", { class: "controls" }, app);
  el("label", { for: "layer" }, controls, "Layer ");
  const layerSelect = el("select", { id: "layer" }, controls);
  for (const l of first.layers) el("option", { value: l.layer }, layerSelect, String(l.layer));
  el("label", { for: "head" }, controls, " Head ");
  const headSelect = el("select", { id: "head" }, controls);
  const current = el("span", { id: "current", class: "current" }, controls);
  layerSelect.addEventListener("change", () => select(+layerSelect.value, state.head));
  headSelect.addEventListener("change", () => select(state.layer, +headSelect.value));
  const single = first.layers.length === 1 && first.layers[0].heads.length === 1;
  if (single && data.caption) {  // one matrix (rollout, heads' score grids): nothing to pick
    for (const node of controls.querySelectorAll("label, select")) node.style.display = "none";
  }
  // what the info line says while nothing is hovered: what hovering shows there
  // what hovering a token says, by side: a head's weights (the default), or a matrix over layers (rollout,
  // attribute: data.verbs, e.g. ["comes from", "goes into"]), which no head "attends" with
  const VERBS = data.verbs || ["attends to", "is attended by"];
  const HINT = data.runs.every((run) => run.lines === false) ? "Hover a cell for its value."
    : data.verbs ? "Hover a token to see what it " + VERBS[0] + " (left) or " + VERBS[1] + " (right); click to keep it."
    : "Hover a token to see whom it attends to (left) or who attends to it (right); click to keep it.";

  // -- every head at a glance ---------------------------------------------------------------------
  const headCount = first.layers.reduce((n, l) => n + l.heads.length, 0);
  const thumbs = [];
  if (headCount > 1) {
    const grid = el("div", { id: "grid", class: "grid" }, app);
    el("div", { class: "grid-title" }, grid, "Every head (" + first.name + "): query rows ↓, key columns →; " +
      (first.perHead ? "each on its own colour scale, min → max; " : "") + "click one");
    const across = Math.max(...first.layers.map((l) => l.heads.length));
    // as wide as the page allows, up to 1000 px: a notebook cell's frame is narrower than a browser window
    const width = Math.min(1000, (app.clientWidth || 1036) - 36);  // 36: the row's label
    const size = Math.max(36, Math.min(88, Math.floor(width / across) - 6));
    const header = el("div", { class: "grid-row" }, grid);
    el("span", { class: "grid-label" }, header, "");
    for (const h of first.layers[0].heads) el("span", { class: "grid-head", style: "width:" + size + "px" }, header, "h" + h.head);
    for (const l of first.layers) {
      const row = el("div", { class: "grid-row" }, grid);
      el("span", { class: "grid-label" }, row, "L" + l.layer);
      for (const h of l.heads) {
        const canvas = el("canvas", { class: "thumb", width: size, height: size, "data-layer": l.layer,
          "data-head": h.head, title: "layer " + l.layer + " head " + h.head }, row);
        drawThumb(canvas, first, h, size);
        canvas.addEventListener("click", () => select(l.layer, h.head));
        thumbs.push(canvas);
      }
    }
  }
  function drawThumb(canvas, run, h, size) {
    const ctx = canvas.getContext("2d"), m = h.m;
    if (!m || !m.length) return;
    const rows = m.length, cols = m[0].length, cw = size / cols, ch = size / cols;
    canvas.height = Math.max(8, Math.round(ch * rows));
    for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) {
      const v = m[i][j];
      ctx.fillStyle = css(rgbOf(run, v === null ? h.low || 0 : v, h));
      ctx.fillRect(Math.floor(j * cw), Math.floor(i * ch), Math.ceil(cw), Math.ceil(ch));
    }
  }

  // -- one head in detail, per run (side by side for compare) ---------------------------------------
  // A fixed height, a line per run: a hover must never move what is under the pointer.
  const described = Math.max(1, data.runs.filter((run) => run.lines !== false).length);  // lines a hover writes
  const info = el("div", { id: "info", class: "info", style: "height:" + (1.5 * described + 0.2) + "em" },
    app, "");
  function say(text) { info.textContent = text || HINT; info.classList.toggle("idle", !text); }
  // several runs (compare, steps): each one's head view above its heatmap, the runs side by side
  const runsBox = el("div", { id: "runs", class: data.runs.length > 1 ? "runs stacked" : "runs" }, app);
  const views = data.runs.map((run, index) => {
    const box = el("div", { class: "run", "data-run": index }, runsBox);
    el("h2", {}, box, run.name);
    const body = el("div", { class: "run-body" }, box);
    return { run: run, box: box, body: body };
  });

  function select(layer, head) {
    const entry = first.layers.find((l) => l.layer === layer);
    if (!entry) return;
    if (!entry.heads.some((h) => h.head === head)) head = entry.heads[0].head;
    state.layer = layer; state.head = head; state.focus = null; state.locked = false;
    layerSelect.value = layer;
    headSelect.innerHTML = "";
    for (const h of entry.heads) el("option", { value: h.head }, headSelect, String(h.head));
    headSelect.value = head;
    current.textContent = single && data.caption ? data.caption : "layer " + layer + " · head " + head;
    for (const t of thumbs) t.classList.toggle("selected", +t.dataset.layer === layer && +t.dataset.head === head);
    for (const view of views) drawView(view);
    say("");
  }

  function drawView(view) {
    view.body.innerHTML = "";
    const h = findHead(view.run, state.layer, state.head);
    if (!h || !h.m) { el("p", {}, view.body, "not kept for this head (past the matrix size limit)"); return; }
    const s = spans(h);
    view.spans = s;
    if (view.run.kind !== "scores" && view.run.lines !== false) view.lines = headView(view, s);
    legend(view, s);
    view.cells = matrix(view, s);
  }

  // bertviz-style: queries on the left, keys on the right, a line per weight
  function headView(view, s) {
    const rows = s.m.length, cols = s.m[0].length, step = 20, top = 24;
    const height = top + Math.max(rows, cols) * step + 10;
    const svg = sv("svg", { class: "headview", width: 380, height: height }, view.body);
    sv("text", { x: 120, y: 14, "text-anchor": "end", class: "axis" }, svg, "query");
    sv("text", { x: 260, y: 14, class: "axis" }, svg, "key");
    const lines = [];
    const group = sv("g", {}, svg);
    for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) {
      const v = s.m[i][j];
      const share = v === null ? 0 : view.run.kind === "norms" ? Math.min(1, v / (s.limit || 1)) : v;  // opacity
      if (share < 0.005) continue;
      const line = sv("line", { x1: 128, y1: top + i * step + 6, x2: 252, y2: top + j * step + 6,
        stroke: "#e8590c", "stroke-width": 2, "stroke-opacity": share }, group);
      line.dataset.q = i; line.dataset.k = j;
      lines.push(line);
    }
    const left = [], right = [];
    for (let i = 0; i < rows; i++) {
      const t = sv("text", { x: 120, y: top + i * step + 10, "text-anchor": "end", class: "tok tok-left",
        "data-i": s.r0 + i }, svg, rowTok(view.run)[s.r0 + i]);
      const w = sv("text", { x: 6, y: top + i * step + 10, class: "w w-left" }, svg, "");
      left.push({ t: t, w: w });
      hover(t, "q", s.r0 + i);
    }
    for (let j = 0; j < cols; j++) {
      const t = sv("text", { x: 260, y: top + j * step + 10, class: "tok tok-right", "data-i": s.c0 + j },
        svg, colTok(view.run)[s.c0 + j]);
      const w = sv("text", { x: 374, y: top + j * step + 10, "text-anchor": "end", class: "w w-right" }, svg, "");
      right.push({ t: t, w: w });
      hover(t, "k", s.c0 + j);
    }
    return { lines: lines, left: left, right: right };
  }

  function matrix(view, s) {
    const rowT = rowTok(view.run), colT = colTok(view.run), axes = view.run.axes || ["query", "key"];
    // key labels stand upright when every one fits its 30 px column (one CJK character, a digit or two), as the
    // SVG's do; else all run up the column (a CJK character set sideways there would be upside down)
    const shown = colT.slice(s.c0, s.c0 + s.m[0].length);
    const upright = shown.every((label) => [...label].reduce((n, ch) => n + (ch.codePointAt(0) > 0x2e80 ? 2 : 1), 0) <= 2);
    const table = el("table", { class: upright ? "matrix upright" : "matrix" }, view.body);
    const head = el("tr", {}, table);
    const corner = el("th", { class: "corner" }, head, view.run.axes ? "" : "q ↓ k →");
    if (view.run.axes) corner.append(axes[0] + " ↓", el("br"), axes[1] + " →");  // two lines: narrow beside "L0"
    for (let j = 0; j < s.m[0].length; j++) {
      const th = el("th", { class: "col", "data-i": s.c0 + j }, head);
      el("span", {}, th, colT[s.c0 + j]);
      hover(th, "k", s.c0 + j);
    }
    if (s.sink) el("span", {}, el("th", { class: "col sink", title: SINK_NOTE }, head), SINK);
    const cells = [];
    s.m.forEach((row, i) => {
      const tr = el("tr", {}, table);
      const th = el("th", { class: "row", "data-i": s.r0 + i }, tr, rowT[s.r0 + i]);
      hover(th, "q", s.r0 + i);
      cells.push(row.map((v, j) => {
        const td = el("td", { "data-q": s.r0 + i, "data-k": s.c0 + j }, tr);
        if (v === null) { td.className = "masked"; return td; }
        const rgb = rgbOf(view.run, v, s);
        td.style.background = css(rgb);
        td.style.color = inkOn(rgb);
        if (s.m[0].length <= 24) td.textContent = view.run.kind === "scores" ? scoreText(view.run, v) : cellText(v, s.limit);
        td.title = rowT[s.r0 + i] + " → " + colT[s.c0 + j] + ": " + fmt(v);
        td.addEventListener("mouseenter", () => {
          say("“" + rowT[s.r0 + i] + "” (" + axes[0] + " " + (s.r0 + i) + ") → “" + colT[s.c0 + j] +
            "” (" + axes[1] + " " + (s.c0 + j) + "): " + noun(view.run) + fmt(v) +
            " · " + view.run.name);
        });
        return td;
      }));
      if (s.sink) {  // the row's learned sink share: with it the row sums to 1
        const v = s.sink[i], td = el("td", { class: "sink" }, tr);
        if (v === null) return;
        const rgb = rgbOf(view.run, v, s);
        td.style.background = css(rgb);
        td.style.color = inkOn(rgb);
        if (s.m[0].length <= 24) td.textContent = cellText(v);
        td.title = rowT[s.r0 + i] + " → " + SINK + ": " + fmt(v) + " (" + SINK_NOTE + ")";
      }
    });
    return cells;
  }

  function hover(node, side, index) {
    node.addEventListener("mouseenter", () => { if (!state.locked) focus(side, index); });
    node.addEventListener("mouseleave", () => { if (!state.locked) focus(null); });
    node.addEventListener("click", () => {
      const same = state.focus && state.focus.side === side && state.focus.index === index;
      state.locked = !(state.locked && same);
      focus(state.locked ? side : null, index);
    });
  }

  // Show, in every run, whom token `index` attends to (side "q") or who attends to it (side "k").
  function focus(side, index) {
    state.focus = side ? { side: side, index: index } : null;
    const lines = [];
    for (const view of views) {
      const s = view.spans;
      if (!s) continue;
      const lv = view.lines;
      if (lv) {
        for (const line of lv.lines) {
          const q = s.r0 + +line.dataset.q, k = s.c0 + +line.dataset.k;
          const on = !side || (side === "q" ? q === index : k === index);
          line.style.display = on ? "" : "none";
        }
        lv.left.forEach((x, i) => { x.t.classList.toggle("active", side === "q" && s.r0 + i === index); x.w.textContent = ""; });
        lv.right.forEach((x, j) => { x.t.classList.toggle("active", side === "k" && s.c0 + j === index); x.w.textContent = ""; });
        if (side === "q" && index >= s.r0 && index < s.r0 + s.m.length)
          s.m[index - s.r0].forEach((v, j) => { if (v !== null) lv.right[j].w.textContent = v.toFixed(2); });
        if (side === "k" && index >= s.c0 && index < s.c0 + s.m[0].length)
          s.m.forEach((row, i) => { const v = row[index - s.c0]; if (v !== null) lv.left[i].w.textContent = v.toFixed(2); });
      }
      for (const row of view.cells || []) for (const td of row) {
        const hit = side && (side === "q" ? +td.dataset.q === index : +td.dataset.k === index);
        td.classList.toggle("hit", !!hit);
      }
      if (side) lines.push(describe(view, s, side, index));
    }
    say(lines.filter(Boolean).join("\n"));
  }

  function describe(view, s, side, index) {
    let pairs = [];
    if (side === "q" && index >= s.r0 && index < s.r0 + s.m.length) {
      pairs = s.m[index - s.r0].map((v, j) => [colTok(view.run)[s.c0 + j], v]);
      if (s.sink) pairs.push([SINK, s.sink[index - s.r0]]);
    }
    else if (side === "k" && index >= s.c0 && index < s.c0 + s.m[0].length)
      pairs = s.m.map((row, i) => [rowTok(view.run)[s.r0 + i], row[index - s.c0]]);
    pairs = pairs.filter((p) => p[1] !== null).sort((a, b) => b[1] - a[1]);
    pairs = pairs.filter((p, rank) => rank === 0 || Math.abs(p[1]) >= 0.005).slice(0, 5);
    const who = "“" + (side === "q" ? rowTok(view.run) : colTok(view.run))[index] + "” (" + index + ")";
    const verb = " " + VERBS[side === "q" ? 0 : 1] + " ";
    return view.run.name + ": " + who + verb + pairs.map((p) => p[0] + " " + fmt(p[1])).join(", ");
  }

  select(state.layer, state.head);
  document.body.dataset.ready = "1";
})();
