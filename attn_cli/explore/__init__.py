"""Stage 8, `attn explore`: a session's state (model, looks, selection) and the Textual widgets that draw it.

session.py (the state, no Textual) · layout.py (sizes) · drawn.py (rendered lines, kept) · view.py (the
drawing) · kinds.py (what a source–target pair and an image draw differently) · widgets.py (Textual widgets)
· keys.py (the keys that change what is looked at) · export.py (`x`) · app.py (keys wired to all of them).
"""
