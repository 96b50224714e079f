"""Stage 2, pure tensor math (no I/O, no model objects): attention, masks, scoring forms, per-head measures, head scores."""
