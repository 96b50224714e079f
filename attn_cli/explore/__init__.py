"""Stage 8, `attn explore`: a session's state (model, looks, selection) and the Textual widgets that draw it.

session.py (the state, no Textual) · layout.py (sizes) · drawn.py (rendered lines, kept) · view.py (the
drawing) · widgets.py (Textual widgets) · export.py (`x`) · app.py (keys wired to all of them).
"""
