// attn's corpus dashboard: a head finder (every head, every score's mean; sort, filter, click) and a head
// page (histograms per score; top texts, decile samples and top edges with the query and its keys
// highlighted; hover a token for its weight). Self-contained: the data is the JSON in <script id="attn-data">;
// every token is set as text (textContent), never as HTML.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("attn-data").textContent);
  const scores = data.scores;
  const app = document.getElementById("app");
  const SVG = "http://www.w3.org/2000/svg";
  const state = { sort: null, descending: true, layer: "all", minScore: scores[0], minValue: 0, head: null, score: null };

  function el(tag, attrs, parent, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }
  function sv(tag, attrs, parent) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (parent) parent.appendChild(node);
    return node;
  }
  // as the terminal writes a score: .97, 1.0, - (undefined)
  function three(v) { return v === null || v === undefined ? "-" : v >= 0.995 ? "1.0" : v.toFixed(2).replace(/^0/, ""); }
  function weightText(v) { return v.toFixed(3); }
  const SEQ = data.weights.map((h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16)));
  function colour(v) {
    const t = Math.min(1, Math.max(0, v)), p = t * (SEQ.length - 1), i = Math.min(Math.floor(p), SEQ.length - 2), f = p - i;
    return SEQ[i].map((a, k) => Math.round(a + (SEQ[i + 1][k] - a) * f));
  }
  function css(rgb) { return "rgb(" + rgb.join(",") + ")"; }
  function ink(rgb) { return (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255 > 0.45 ? "#000" : "#fff"; }
  function headName(h) { return h.layer + "." + h.head; }

  // -- the head finder ------------------------------------------------------------------------------
  const finder = el("section", { id: "finder" }, app);
  el("h2", {}, finder, "Head finder");
  el("div", { class: "hint" }, finder, "Each head's mean of every score over the texts. Click a column to sort by it, a head to open it.");
  const controls = el("div", { class: "controls" }, finder);
  el("label", { for: "layer" }, controls, "Layer ");
  const layerSelect = el("select", { id: "layer" }, controls);
  el("option", { value: "all" }, layerSelect, "all");
  for (const l of [...new Set(data.heads.map((h) => h.layer))]) el("option", { value: l }, layerSelect, String(l));
  el("label", { for: "min-score" }, controls, " Only heads whose ");
  const minScore = el("select", { id: "min-score" }, controls);
  for (const s of scores) el("option", { value: s }, minScore, data.names[s]);
  el("label", { for: "min-value" }, controls, " is at least ");
  const minValue = el("input", { id: "min-value", type: "number", min: "0", max: "1", step: "0.05", value: "0" }, controls);
  const shown = el("span", { id: "shown", class: "hint" }, controls);
  layerSelect.addEventListener("change", () => { state.layer = layerSelect.value; drawRows(); });
  minScore.addEventListener("change", () => { state.minScore = minScore.value; drawRows(); });
  minValue.addEventListener("input", () => { state.minValue = +minValue.value || 0; drawRows(); });

  const wrap = el("div", { class: "finder-wrap" }, finder);
  const table = el("table", { id: "heads", class: "heads" }, wrap);
  const headRow = el("tr", {}, el("thead", {}, table));
  el("th", { class: "name" }, headRow, "head");
  el("th", { class: "label" }, headRow, "label");
  scores.forEach((s, i) => {
    const th = el("th", { "data-score": s, class: "score", title: "sort by " + data.names[s] }, headRow);
    th.textContent = data.names[s];
    th.addEventListener("click", () => sortBy(s));
  });
  const body = el("tbody", {}, table);

  function sortBy(score) {
    if (state.sort === score) state.descending = !state.descending;
    else { state.sort = score; state.descending = true; }
    drawRows();
  }
  function drawRows() {
    let heads = data.heads.slice();
    if (state.layer !== "all") heads = heads.filter((h) => String(h.layer) === state.layer);
    const mi = scores.indexOf(state.minScore);
    if (state.minValue > 0) heads = heads.filter((h) => h.mean[mi] !== null && h.mean[mi] >= state.minValue);
    if (state.sort !== null) {
      const si = scores.indexOf(state.sort), sign = state.descending ? -1 : 1;
      heads.sort((a, b) => {
        const x = a.mean[si], y = b.mean[si];
        if (x === null || y === null) return (x === null) - (y === null);  // undefined last, either way
        return sign * (x - y) || a.layer - b.layer || a.head - b.head;
      });
    }
    for (const th of headRow.querySelectorAll("th.score")) {
      th.classList.toggle("sorted", th.dataset.score === state.sort);
      th.dataset.order = th.dataset.score === state.sort ? (state.descending ? "↓" : "↑") : "";
    }
    body.textContent = "";
    for (const h of heads) {
      const tr = el("tr", { "data-layer": h.layer, "data-head": h.head, class: "head-row" }, body);
      el("td", { class: "name" }, tr, headName(h));
      const label = el("td", { class: "label" }, tr);
      el("span", { class: "code lab-" + h.label }, label, data.codes[h.label] || "·");
      el("span", {}, label, " " + (data.names[h.label] || h.label));
      h.mean.forEach((v, i) => {
        const td = el("td", { class: "num", title: data.names[scores[i]] + " " + (v === null ? "undefined" : v) }, tr, three(v));
        if (v !== null) td.style.background = "rgba(26,115,232," + (0.55 * v).toFixed(3) + ")";
      });
      tr.classList.toggle("selected", state.head === h);
      tr.addEventListener("click", () => openHead(h));
    }
    shown.textContent = heads.length + " of " + data.heads.length + " heads";
  }

  // -- the head page ----------------------------------------------------------------------------------
  const page = el("section", { id: "headpage", class: "headpage" }, app);
  const title = el("h2", { id: "head-title" }, page, "Click a head in the finder to see its dashboard");
  const sinkLine = el("div", { id: "sink", class: "hint" }, page);
  const hists = el("div", { id: "histograms", class: "histograms" }, page);
  const tip = el("div", { id: "tip", class: "tip" }, page, "Hover a token of an example to see the query's weight on it.");
  const legend = el("div", { class: "legend" }, page);
  el("span", { class: "tok query" }, legend, "query");
  el("span", {}, legend, " the highlighted query token; its strongest keys coloured by weight: 0");
  el("span", { class: "ramp", style: "background: linear-gradient(to right, " + data.weights.join(", ") + ")" }, legend);
  el("span", {}, legend, "1");
  const lists = el("div", { id: "examples" }, page);

  function openHead(h, score) {
    state.head = h;
    state.score = score || h.score;
    for (const tr of body.querySelectorAll("tr")) tr.classList.toggle("selected", +tr.dataset.layer === h.layer && +tr.dataset.head === h.head);
    title.textContent = "layer " + h.layer + " · head " + h.head + " · " + (data.names[h.label] || h.label);
    sinkLine.textContent = h.sink ? "sink key " + h.sink.token + " (position " + h.sink.position + ", in " + h.sink.texts + " texts)" : "no sink key";
    drawHistograms(h);
    drawExamples(h);
    if (location.hash !== "#" + headName(h)) history.replaceState(null, "", "#" + headName(h));
  }

  function drawHistograms(h) {
    hists.textContent = "";
    scores.forEach((s, i) => {
      const box = el("div", { class: "hist" + (s === state.score ? " chosen" : ""), "data-score": s,
        title: "show the examples of " + data.names[s] }, hists);
      const name = el("div", { class: "hist-name" }, box);
      el("span", { class: "code lab-" + s }, name, data.codes[s]);
      el("span", {}, name, " " + data.names[s]);
      const counts = h.hist[i], fullest = Math.max(1, ...counts), w = 8, H = 44;
      const svg = sv("svg", { width: counts.length * w, height: H + 12, class: "bars" }, box);
      counts.forEach((c, b) => {
        const height = c ? Math.max(1, Math.round(H * c / fullest)) : 0;
        const bar = sv("rect", { x: b * w, y: H - height, width: w - 1, height: height, class: "bar" }, svg);
        const t = sv("title", {}, bar);
        t.textContent = (b / counts.length).toFixed(2) + "–" + ((b + 1) / counts.length).toFixed(2) + ": " + c + " texts";
      });
      sv("line", { x1: 0, x2: counts.length * w, y1: H + 0.5, y2: H + 0.5, class: "axis" }, svg);
      const zero = sv("text", { x: 0, y: H + 11, class: "tick" }, svg); zero.textContent = "0";
      const one = sv("text", { x: counts.length * w - 6, y: H + 11, class: "tick" }, svg); one.textContent = "1";
      el("div", { class: "hist-stats" }, box, h.count[i] ? three(h.mean[i]) + "±" + three(h.std[i]) + "  " +
        three(h.q05[i]) + "–" + three(h.q95[i]) + "  " + h.count[i] + " texts" : "undefined in every text");
      box.addEventListener("click", () => openHead(h, s));
    });
  }

  function drawExamples(h) {
    lists.textContent = "";
    const found = data.examples[headName(h)] || { top: {}, decile: {}, edge: [] };
    const name = data.names[state.score];
    section("top", "Top texts by " + name + " (the text's score)", found.top[state.score] || []);
    section("decile", "A sample from each tenth of " + name + ", lowest first", found.decile[state.score] || []);
    section("edge", "Top edges (single weights, the sink key excluded)", found.edge || []);
  }
  function section(kind, heading, examples) {
    const box = el("div", { class: "examples", id: "examples-" + kind }, lists);
    el("h3", {}, box, heading);
    if (!examples.length) el("div", { class: "hint" }, box, "none in this store");
    for (const e of examples) exampleLine(box, kind, e);
  }
  function exampleLine(parent, kind, e) {
    const line = el("div", { class: "example" }, parent);
    el("span", { class: "value" }, line, (kind === "decile" ? "d" + e.d + " " : "") + three(e.v));
    el("span", { class: "text-id" }, line, "text " + e.t);
    const context = el("span", { class: "context" }, line);
    if (e.s > 0) el("span", { class: "cut" }, context, "… ");
    e.tok = e.tok || windowOf(e);
    const weights = new Map(e.k.map((k, i) => [k, e.w[i]]));
    const queryToken = e.tok[e.q - e.s];
    e.tok.forEach((token, i) => {
      const position = e.s + i;
      const span = el("span", { class: "tok", "data-pos": position }, context, token);
      if (position === e.q) span.classList.add("query");
      if (weights.has(position) && position !== e.q) {  // the query keeps its own colour, also as its own key
        const rgb = colour(weights.get(position));
        span.classList.add("key");
        span.style.background = css(rgb);
        span.style.color = ink(rgb);
        span.dataset.weight = weights.get(position);
      }
      span.addEventListener("mouseenter", () => {
        tip.textContent = position === e.q
          ? "query " + JSON.stringify(token) + " (position " + position + " of text " + e.t + ")" +
            (weights.has(position) ? ": its weight on itself " + weightText(weights.get(position)) : "")
          : weights.has(position)
            ? "weight of query " + JSON.stringify(queryToken) + " on " + JSON.stringify(token) + " (position " + position + "): " + weightText(weights.get(position))
            : JSON.stringify(token) + " (position " + position + "): not among the query's strongest keys the store keeps";
      });
      context.appendChild(document.createTextNode(" "));
    });
    if (e.s + e.tok.length < e.n) el("span", { class: "cut" }, context, "…");
  }

  // an example's c tokens from position s of text t: the run of the text's known tokens that holds them
  function windowOf(e) {
    const run = data.texts[e.t].find((r) => r[0] <= e.s && e.s + e.c <= r[0] + r[1].length);
    return run[1].slice(e.s - run[0], e.s - run[0] + e.c);
  }

  drawRows();
  const wanted = (location.hash || "").slice(1);
  const first = data.heads.find((h) => headName(h) === wanted) ||
    (data.start && data.heads.find((h) => h.layer === data.start[0] && h.head === data.start[1]));
  if (first) openHead(first);
  document.body.dataset.ready = "1";
})();
