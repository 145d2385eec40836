"""Errors shared by every layer that learns something before it can answer."""

from __future__ import annotations


class NotFittedError(RuntimeError):
    """``explain`` (or saving) called on an explainer that must be fitted first."""
