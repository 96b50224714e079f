"""Stage 8, `attn explore`: a session's state (model, looks, selection) and the Textual widgets that draw it."""
