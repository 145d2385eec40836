"""Progress reporting: the engine calls an optional ``progress(fraction, message)`` callback.

Library code never prints; the CLI passes a tqdm bar (:func:`tqdm_progress`), the app an
``st.progress`` widget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Optional

ProgressFn = Callable[[float, str], None]


def report(progress: Optional[ProgressFn], fraction: float, message: str = "") -> None:
    """Call ``progress`` if given, with the fraction clipped to [0, 1]."""
    if progress is not None:
        progress(min(1.0, max(0.0, float(fraction))), message)


def scaled(progress: Optional[ProgressFn], start: float, stop: float) -> Optional[ProgressFn]:
    """A callback mapping [0, 1] onto [start, stop] of ``progress`` (for multi-stage work)."""
    if progress is None:
        return None

    def inner(fraction: float, message: str = "") -> None:
        report(progress, start + (stop - start) * fraction, message)

    return inner


@contextmanager
def tqdm_progress(description: str, enabled: bool = True) -> Iterator[Optional[ProgressFn]]:
    """A progress callback drawing a tqdm bar on stderr (for the CLI)."""
    if not enabled:
        yield None
        return
    from tqdm.auto import tqdm

    bar = tqdm(
        total=1000,
        desc=description,
        unit="‰",
        leave=False,
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed} {postfix}",
    )

    def update(fraction: float, message: str = "") -> None:
        bar.n = int(round(fraction * 1000))
        if message:
            bar.set_postfix_str(message, refresh=False)
        bar.refresh()

    try:
        yield update
    finally:
        bar.close()
