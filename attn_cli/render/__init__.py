"""Renderers: Rich renderables for the terminal (terminal.py) and files (files.py)."""
