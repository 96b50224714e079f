"""Backends load models and produce Captures; see base.py for the contract."""
