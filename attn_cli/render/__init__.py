"""Renderers. Terminal: Rich renderables that size themselves to the width they are given (heatmap.py: heatmaps,
the all-heads grid, vector tables; terminal.py, compare_view.py, steps_view.py, models_view.py: the views), on
the colour scales and number formats of scale.py. Files: files.py (JSON, tensors, --save) and figures.py (a
vector SVG figure and a self-contained interactive HTML page, page.js/page.css inlined)."""
