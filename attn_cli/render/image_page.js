// An image's attention page (render/image_figures.py): every head's picture, the image under a heat
// overlay of the query's weights on the patches. Click a patch: it becomes every head's query.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("attn-data").textContent);
  const app = document.getElementById("app");
  const first = data.specials.length;
  const hasCls = data.specials[0] === "[CLS]";
  let query = data.query; // [row, col] (--query, then clicks), or null: [CLS] (or the patches' mean without one)
  const status = document.createElement("p");
  const reset = document.createElement("button");
  reset.textContent = hasCls ? "query: [CLS]" : "query: the patches' mean";
  reset.addEventListener("click", () => { query = null; drawAll(); });
  const controls = document.createElement("div");
  const figures = document.createElement("div");
  controls.append(status, reset);
  app.style.display = "block"; // the controls above, the pictures below (page.css lays #app out for heatmaps)
  app.append(controls, figures);
  const image = new Image();
  const canvases = data.heads.map((head) => {
    const figure = document.createElement("figure");
    figure.style.display = "inline-block";
    const caption = document.createElement("figcaption");
    caption.textContent = head.title;
    const canvas = document.createElement("canvas");
    canvas.width = 224; canvas.height = 224;
    canvas.style.cursor = "crosshair";
    canvas.addEventListener("click", (event) => {
      const box = canvas.getBoundingClientRect();
      const col = Math.min(data.cols - 1, Math.floor((event.clientX - box.left) / box.width * data.cols));
      const row = Math.min(data.rows - 1, Math.floor((event.clientY - box.top) / box.height * data.rows));
      query = [row, col];
      drawAll();
    });
    figure.append(caption, canvas);
    figures.append(figure);
    return canvas;
  });

  // A head's query rows on the patches (render/image_figures.py coded_rows): a byte per patch, 0 the row's
  // smallest weight, 255 its largest, and each row's [smallest, largest] as float32; the last row the patches' mean.
  const patches = data.rows * data.cols;
  function decoded(text) {
    const raw = atob(text), bytes = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    return bytes;
  }
  const coded = data.heads.map((head) => ({ codes: decoded(head.codes), ranges: new DataView(decoded(head.ranges).buffer) }));

  function queryRow(head) { // the query's weights on the patches, row by row
    const rows = head.codes.length / patches;
    const index = query ? first + query[0] * data.cols + query[1] : hasCls ? 0 : rows - 1;
    const low = head.ranges.getFloat32(8 * index, true), high = head.ranges.getFloat32(8 * index + 4, true);
    return Array.from(head.codes.subarray(index * patches, (index + 1) * patches), (code) => low + code / 255 * (high - low));
  }

  function draw(canvas, head) {
    const context = canvas.getContext("2d");
    const row = queryRow(head);
    const low = Math.min(...row), high = Math.max(...row);
    context.drawImage(image, 0, 0, canvas.width, canvas.height);
    const w = canvas.width / data.cols, h = canvas.height / data.rows;
    row.forEach((value, index) => {
      const share = high > low ? (value - low) / (high - low) : 1;
      context.globalAlpha = 0.75 * share;
      context.fillStyle = data.colours[Math.round(share * (data.colours.length - 1))];
      context.fillRect((index % data.cols) * w, Math.floor(index / data.cols) * h, w, h);
    });
    context.globalAlpha = 1;
    if (query) {
      context.strokeStyle = "#00e5ff"; context.lineWidth = 2;
      context.strokeRect(query[1] * w + 1, query[0] * h + 1, w - 2, h - 2);
    }
  }

  function drawAll() {
    status.textContent = "attention from " + (query ? "r" + query[0] + "c" + query[1] : (hasCls ? "[CLS]" : "the patches' mean")) +
      " · click a patch to make it the query · " + data.rows + " × " + data.cols + " patches";
    coded.forEach((head, index) => draw(canvases[index], head));
    document.body.dataset.ready = "1"; // drawn: what a test waits for
  }

  image.onload = drawAll;
  image.src = data.image;
})();
