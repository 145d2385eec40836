"""Runnable examples built on the engine (``python -m gem_core.examples.<name>``)."""
