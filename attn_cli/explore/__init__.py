"""The explore stage: `attn explore`, a full-screen Textual app on a model loaded once.

session.py (the state, no Textual) · layout.py (sizes) · drawn.py (rendered lines, kept) · view.py (the
drawing) · widgets.py (Textual widgets) · export.py (`x`) · app.py (keys wired to all of them).
"""
