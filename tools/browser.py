"""The app in a real browser: a ``streamlit run`` server and Debian's Chromium through Playwright.

What the real-browser tests (``tests/browser``) and the app benchmark (``tools/bench_app.py``,
``python -m gem_core bench app``) share: :class:`AppServer` (a fresh server on the loopback
interface, always stopped with its process group), :func:`launch_chromium`, and page helpers that
wait for Streamlit's script runs and for the pyvis canvases to be drawn. Chromium is Debian's
``chromium`` package (``apt-get install chromium``); Playwright's own browser download is never
used.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

PROJECT_ROOT = Path(__file__).resolve().parents[1]
APP_SCRIPT = PROJECT_ROOT / "app" / "streamlit_app.py"

CHROMIUM_ARGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
)
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")

# Streamlit's markers: the script run is over / the page's main area.
IDLE = "[data-testid=stApp][data-test-script-state=notRunning]"
MAIN = "[data-testid=stMain]"
ERRORS = ("[data-testid=stException], [data-testid=stAlertContentError]")


# ----------------------------------------------------------------------------- browser

def find_chromium() -> Optional[str]:
    """Debian's Chromium: ``$GEM_CHROMIUM``, then /usr/bin/chromium, then ``chromium`` on PATH."""
    explicit = os.environ.get("GEM_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for path in CHROMIUM_CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def browser_unavailable_reason() -> Optional[str]:
    """Why a real-browser run cannot happen here (``None`` when it can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"the Python package playwright is not installed ({exc}); pip install playwright"
    if find_chromium() is None:
        return ("Chromium not found (looked at $GEM_CHROMIUM, " + ", ".join(CHROMIUM_CANDIDATES)
                + " and PATH); on Debian: apt-get install chromium")
    return None


def launch_chromium(playwright: Any, executable: Optional[str] = None) -> Any:
    """Launch Debian's Chromium headless through a Playwright (sync or async) instance."""
    path = executable or find_chromium()
    if path is None:
        raise RuntimeError(browser_unavailable_reason() or "Chromium not found")
    return playwright.chromium.launch(executable_path=path, args=list(CHROMIUM_ARGS),
                                      headless=True)


# ----------------------------------------------------------------------------- server

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppServer:
    """``python -m streamlit run app/streamlit_app.py`` on 127.0.0.1 as a child process.

    Use as a context manager (or :meth:`start` / :meth:`stop`): the server always stops, with
    its whole process group. Output goes to ``log_path`` (a temporary file by default).
    """

    def __init__(self, port: Optional[int] = None, cache_dir: Optional[str | Path] = None,
                 env: Optional[dict[str, str]] = None, log_path: Optional[str | Path] = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self.env = dict(os.environ if env is None else env)
        if self.cache_dir is not None:
            self.env["GEM_CACHE_DIR"] = str(self.cache_dir)
        self.log_path = Path(log_path) if log_path else Path(
            tempfile.mkstemp(prefix="gem-streamlit-", suffix=".log")[1])
        self.proc: Optional[subprocess.Popen] = None
        self.started_at: Optional[float] = None
        self._log = None

    def command(self) -> list[str]:
        return [sys.executable, "-m", "streamlit", "run", str(APP_SCRIPT),
                "--server.headless", "true", "--server.address", "127.0.0.1",
                "--server.port", str(self.port), "--browser.gatherUsageStats", "false"]

    def start(self) -> "AppServer":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "w", encoding="utf-8")
        self.started_at = time.perf_counter()
        self.proc = subprocess.Popen(self.command(), cwd=PROJECT_ROOT, env=self.env,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_healthy(self, timeout: float = 120.0) -> float:
        """Wait for ``/_stcore/health`` to answer ``ok``; returns the seconds since start."""
        assert self.proc is not None and self.started_at is not None, "start() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with code {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as resp:
                    if resp.read().decode().strip() == "ok":
                        return time.perf_counter() - self.started_at
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"streamlit not healthy after {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            # The server leads its own process group (start_new_session): end that group only.
            for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> "AppServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# ----------------------------------------------------------------------------- page helpers

# JavaScript: painted pixels of the vis network in window ``w`` (0: not there, not drawn or
# stale). Every 61st pixel is enough to tell a drawn network from a blank canvas and keeps the
# poll (every 15 ms while waiting) from slowing the page it measures.
_COUNT_PAINTED_JS = """(w) => {
  if (!w || !w.vis || !w.network || w.__gemOld) return 0;
  const c = w.document.querySelector('canvas');
  if (!c || !c.width || !c.height) return 0;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const stride = 61;
  let n = 0;
  for (let i = 3; i < d.length; i += 4 * stride) if (d[i] > 0) n++;
  return n * stride;
}"""
# ... run inside a pyvis iframe, on itself
_DRAWN_JS = f"() => ({_COUNT_PAINTED_JS})(window)"
_MARK_JS = "() => { window.__gemOld = true; }"
# What identifies the drawn explanation: every edge with its colour and width.
EDGES_JS = """() => JSON.stringify(edges.get().map(
  e => [e.from, e.to, String(e.color), Math.round(e.width * 1000) / 1000]))"""


def wait_idle(page: Any, timeout_ms: float = 120_000) -> None:
    page.wait_for_selector(IDLE, timeout=timeout_ms)


def panel_frame(page: Any, panel: str) -> Any:
    """The content frame of the pyvis iframe in ``st.container(key=panel)`` (or None)."""
    handle = page.query_selector(f".st-key-{panel} iframe")
    return None if handle is None else handle.content_frame()


def panel_drawn(page: Any, panel: str) -> int:
    """Painted pixels of the pyvis canvas in a panel, estimated from a sample (0: not there,
    not drawn or stale)."""
    try:
        frame = panel_frame(page, panel)
        return 0 if frame is None else int(frame.evaluate(_DRAWN_JS) or 0)
    except Exception:  # frame navigating / detached: not drawn yet
        return 0


def mark_panels_old(page: Any, panels: Sequence[str]) -> None:
    """Flag the current frames so :func:`panel_drawn` only counts re-rendered ones."""
    for panel in panels:
        try:
            frame = panel_frame(page, panel)
            if frame is not None:
                frame.evaluate(_MARK_JS)
        except Exception:
            pass


# The panels' frames are served by the app's own server (same origin as the page), so one
# evaluation in the page reads every panel: a poll costs the page one task, not three
# DevTools round trips per panel (which, every 15 ms, slowed the very page being timed).
_ALL_DRAWN_JS = f"""([panels, selectors]) => {{
  if (!selectors.every(s => document.querySelector(s) !== null)) return null;
  const count = {_COUNT_PAINTED_JS};
  const out = {{}};
  for (const panel of panels) {{
    const frame = document.querySelector('.st-key-' + panel + ' iframe');
    try {{ out[panel] = count(frame && frame.contentWindow); }}
    catch (e) {{ out[panel] = -1; }}  // another origin: read the frame on its own
  }}
  return out;
}}"""


def _drawn_now(page: Any, panels: Sequence[str], selectors: Sequence[str]
               ) -> Optional[dict[str, int]]:
    """Each panel's painted-pixel estimate (``None`` while a selector is missing)."""
    try:
        counts = page.evaluate(_ALL_DRAWN_JS, [list(panels), list(selectors)])
    except Exception:  # the page navigating: nothing is drawn yet
        return {panel: 0 for panel in panels}
    if counts is None:
        return None
    return {p: (panel_drawn(page, p) if n < 0 else n) for p, n in counts.items()}


def wait_panels_drawn(page: Any, panels: Sequence[str], selectors: Sequence[str] = (),
                      timeout: float = 120.0, start: Optional[float] = None
                      ) -> dict[str, float]:
    """Wait until every panel's canvas is drawn (and every selector present).

    Returns the seconds from ``start`` (default: now) at which each panel was first seen drawn.
    """
    t0 = time.perf_counter() if start is None else start
    deadline = time.perf_counter() + timeout
    seen: dict[str, float] = {}
    while True:
        counts = _drawn_now(page, [p for p in panels if p not in seen], selectors)
        if counts is not None:
            now = time.perf_counter() - t0
            seen.update({p: now for p, n in counts.items() if n > 0})
            if len(seen) == len(panels):
                return seen
        if time.perf_counter() > deadline:
            missing = [p for p in panels if p not in seen]
            raise TimeoutError(f"not drawn after {timeout:.0f} s: panels {missing}, "
                               f"selectors {[s for s in selectors if not page.query_selector(s)]}")
        page.wait_for_timeout(15)


def explanation_panels(page: Any) -> list[str]:
    """Container keys of the Explore panels that currently show an explanation (not 'original')."""
    keys = page.eval_on_selector_all(
        f"{MAIN} [class*='st-key-panel_']",
        "els => els.filter(e => e.querySelector('iframe')).map("
        "e => [...e.classList].find(c => c.startsWith('st-key-panel_')).slice(7))")
    return [k for k in keys if k != "panel_original"]


def selected_methods(page: Any) -> list[str]:
    """The chips of the sidebar's explainer multiselect (titles, in order)."""
    return page.eval_on_selector_all(".st-key-sb_methods [data-tag]",
                                     "els => els.map(e => e.getAttribute('aria-label'))")


def set_k(page: Any, dataset: str, direction: str = "ArrowRight") -> None:
    """Move the sidebar's K slider one step with the keyboard."""
    thumb = page.locator(f".st-key-sb_k_{dataset} input[type=range]")
    thumb.focus()
    page.keyboard.press(direction)


def slider_value(page: Any, dataset: str) -> int:
    return int(page.locator(f".st-key-sb_k_{dataset} input[type=range]").input_value())


def set_instance(page: Any, dataset: str, position: int) -> None:
    """Type a test-instance position into the Explore page's index box and submit it."""
    box = page.locator(f".st-key-ex_index_{dataset} input")
    box.fill(str(position))
    box.press("Enter")


def error_texts(page: Any) -> list[str]:
    return page.locator(ERRORS).all_inner_texts()


def open_multiselect(page: Any, key_prefix: str, search: str) -> None:
    """Open the dropdown of the multiselect whose widget key starts with ``key_prefix``, its
    options narrowed to ``search``: the What-if pickers take no typing (one click picks one
    item), so ``search`` goes into their section's find box (``…_find_…``, whole atom / node
    labels) and the page reruns first; other multiselects get it typed."""
    find = key_prefix.replace("_edges_", "_find_").replace("_nodes_", "_find_")
    box = page.locator(f"{MAIN} [class*='st-key-{find}'] input")
    if find != key_prefix and box.count():
        box.first.fill(search)
        box.first.press("Enter")
        page.wait_for_timeout(200)  # let the rerun start before waiting for it to end
        wait_idle(page)
        page.locator(f"{MAIN} [class*='st-key-{key_prefix}'] input").first.click()
        return
    page.locator(f"{MAIN} [class*='st-key-{key_prefix}'] input").first.click()
    page.keyboard.type(search)


def choose_option(page: Any, label: str) -> None:
    """Click the open dropdown's option ``label`` (its whole text)."""
    page.get_by_role("option", name=label, exact=True).click()


def click_option(page: Any, key_prefix: str, search: str, label: str, attempts: int = 3) -> float:
    """Open the multiselect ``key_prefix`` narrowed to ``search`` and click its option
    ``label``; returns the ``time.perf_counter()`` of the click that took. A rerun still in
    flight (a panel saying it was drawn) may close the dropdown under a loaded machine: it is
    opened again, up to ``attempts`` times."""
    import time

    for attempt in range(attempts):
        try:
            page.wait_for_timeout(300)  # let a rerun start before waiting for it to end
            wait_idle(page)
            open_multiselect(page, key_prefix, search)
            t = time.perf_counter()
            page.get_by_role("option", name=label, exact=True).click(timeout=20_000)
            return t
        except Exception:
            if attempt == attempts - 1:
                raise
            page.keyboard.press("Escape")
    raise AssertionError("unreachable")


def pick_option(page: Any, key_prefix: str, label: str, search: Optional[str] = None) -> None:
    """Select ``label`` in a multiselect (typing ``search``, default the label's first word, to
    find it), then close the dropdown."""
    open_multiselect(page, key_prefix, search or label.split(" ")[0])
    choose_option(page, label)
    page.keyboard.press("Escape")
