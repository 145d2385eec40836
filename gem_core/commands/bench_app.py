"""``bench app``: the Streamlit app in a real browser (Debian Chromium driven by Playwright).

Starts a fresh ``streamlit run`` server on the loopback interface, opens the Explore page and
measures, as a user sees it:

* launch → first explanation: from starting the server process until the first explainer panel
  has its pyvis network drawn on the canvas (goal ≤ 15 s);
* K change: from the key press on the sidebar's K slider until every explanation panel shows
  the new top-K (goal ≤ 1 s);
* instance change: from entering another test instance until every panel shows it (≤ 1 s).

The helpers here (:class:`AppServer`, :func:`launch_chromium`, :func:`panel_drawn`, ...) are
also what the real-browser tests in ``tests/browser`` use. Chromium is Debian's ``chromium``
package (``apt-get install chromium``); Playwright's own browser download is never used.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from .common import add_json_arg, write_json

PROJECT_ROOT = Path(__file__).resolve().parents[2]
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

GOALS = {"first_explanation_s": 15.0, "k_change_s": 1.0, "instance_change_s": 1.0}


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

# JavaScript run inside a pyvis iframe: is the vis network there and drawn on its canvas?
_DRAWN_JS = """() => {
  if (typeof vis === 'undefined' || typeof network === 'undefined' || window.__gemOld) return 0;
  const c = document.querySelector('canvas');
  if (!c || !c.width || !c.height) return 0;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  // Every 61st pixel is enough to tell a drawn network from a blank canvas and keeps this
  // poll (run every 15 ms while waiting) from slowing the page it measures.
  const stride = 61;
  let n = 0;
  for (let i = 3; i < d.length; i += 4 * stride) if (d[i] > 0) n++;
  return n * stride;
}"""
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
        ready = all(page.query_selector(s) is not None for s in selectors)
        if ready:
            for panel in panels:
                if panel not in seen and panel_drawn(page, panel) > 0:
                    seen[panel] = time.perf_counter() - t0
        if ready and len(seen) == len(panels):
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


# ----------------------------------------------------------------------------- benchmark

def _cache_state(cache: Path, dataset: str) -> dict[str, Any]:
    """What the engine cache holds for ``dataset`` before the server starts."""
    files = [p for p in cache.rglob("*") if p.is_file()] if cache.is_dir() else []
    mine = [str(p.relative_to(cache)) for p in files if dataset in p.name]
    from ..store import ASSETS_DIR

    return {"cache_dir": str(cache), "files": len(files), dataset: sorted(mine),
            "warm": bool(mine),
            "shipped_target": (ASSETS_DIR / "targets" / f"{dataset}.pt").exists(),
            "shipped_gem": (ASSETS_DIR / "explainers" / f"{dataset}.pt").exists()}


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def run_app(args: argparse.Namespace) -> int:
    from playwright.sync_api import sync_playwright

    reason = browser_unavailable_reason()
    if reason:
        print(f"bench app: {reason}", file=sys.stderr)
        return 2
    dataset = "ba_shapes"  # the app's default dataset
    env = dict(os.environ)
    tmp: Optional[tempfile.TemporaryDirectory] = None
    if args.fresh_cache:
        tmp = tempfile.TemporaryDirectory(prefix="gem-bench-cache-")
        env["GEM_CACHE_DIR"] = tmp.name
    from ..store import cache_dir

    # The server's cache folder: $GEM_CACHE_DIR, or the engine's default one.
    cache = Path(env["GEM_CACHE_DIR"]).expanduser() if env.get("GEM_CACHE_DIR") else cache_dir()
    env["GEM_CACHE_DIR"] = str(cache)
    state = _cache_state(cache, dataset)
    result: dict[str, Any] = {"dataset": dataset, "cache": state, "goals": GOALS,
                              "threads": env.get("GEM_NUM_THREADS", "")}
    server = AppServer(env=env, port=args.port)
    try:
        with sync_playwright() as pw:
            t = time.perf_counter()
            browser = launch_chromium(pw)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(args.timeout * 1000)
            result["browser_launch_s"] = time.perf_counter() - t

            server.start()
            t0 = server.started_at
            result["server_healthy_s"] = server.wait_healthy(args.timeout)
            page.goto(server.url + "/")
            page.wait_for_selector(f"{MAIN} .st-key-panel_original", timeout=args.timeout * 1000)
            result["page_shell_s"] = time.perf_counter() - t0
            first = None
            deadline = time.perf_counter() + args.timeout
            while first is None:
                for panel in explanation_panels(page):
                    if panel_drawn(page, panel) > 0:
                        first = (panel, time.perf_counter() - t0)
                        break
                if first is None:
                    if time.perf_counter() > deadline:
                        raise TimeoutError("no explanation panel drawn")
                    page.wait_for_timeout(15)
            result["first_explanation_panel"] = first[0].removeprefix("panel_")
            result["first_explanation_s"] = first[1]
            wait_idle(page, args.timeout * 1000)
            panels = explanation_panels(page)
            wait_panels_drawn(page, ["panel_original", *panels], timeout=args.timeout)
            result["all_panels_s"] = time.perf_counter() - t0
            result["panels"] = [p.removeprefix("panel_") for p in panels]
            result["methods_selected"] = selected_methods(page)

            k_times, k_panels = [], []
            k = slider_value(page, dataset)
            for i in range(args.repeats):
                direction = "ArrowLeft" if k >= 9 or (i % 2 and k > 5) else "ArrowRight"
                k += 1 if direction == "ArrowRight" else -1
                mark_panels_old(page, panels)
                t = time.perf_counter()
                set_k(page, dataset, direction)
                sel = [f".st-key-ex_svg_{dataset}-0-{p.removeprefix('panel_')}-k{k}"
                       for p in panels]
                seen = wait_panels_drawn(page, panels, sel, args.timeout, start=t)
                k_times.append(max(seen.values()) if seen else time.perf_counter() - t)
                k_panels.append({p.removeprefix("panel_"): s for p, s in seen.items()})
                wait_idle(page, args.timeout * 1000)
            result["k_change_s"] = {"median": _median(k_times), "max": max(k_times),
                                    "runs": k_times, "per_panel": k_panels}

            i_times, i_panels = [], []
            for pos in args.positions:
                mark_panels_old(page, ["panel_original", *panels])
                t = time.perf_counter()
                set_instance(page, dataset, pos)
                sel = [f".st-key-ex_svg_{dataset}-{pos}-{p.removeprefix('panel_')}-k{k}"
                       for p in panels]
                seen = wait_panels_drawn(page, ["panel_original", *panels], sel,
                                         args.timeout, start=t)
                i_times.append(max(seen.values()))
                i_panels.append({p.removeprefix("panel_"): s for p, s in seen.items()})
                wait_idle(page, args.timeout * 1000)
            result["instance_change_s"] = {"median": _median(i_times), "max": max(i_times),
                                           "runs": i_times, "positions": list(args.positions),
                                           "per_panel": i_panels}
            result["errors"] = error_texts(page)
            if args.screenshot:
                page.screenshot(path=args.screenshot)
            browser.close()
    finally:
        server.stop()
        if tmp is not None:
            tmp.cleanup()
    _print_table(result)
    write_json({"bench": {"app": result}}, args.json)
    return 1 if result["errors"] else 0


def _print_table(r: dict[str, Any]) -> None:
    c = r["cache"]
    warm = ("warm: " + ", ".join(c[r["dataset"]])) if c["warm"] else "cold (nothing cached)"
    print(f"bench app: fresh `streamlit run` on 127.0.0.1, Explore page on {r['dataset']}, "
          f"Chromium headless, GEM_NUM_THREADS={r['threads'] or 'unset'}")
    print(f"  engine cache {c['cache_dir']}: {warm}; shipped target "
          f"{'yes' if c['shipped_target'] else 'no'}, shipped Gem "
          f"{'yes' if c['shipped_gem'] else 'no'}")
    print(f"  explainers selected: {', '.join(r['methods_selected'])}; panels drawn: "
          f"{', '.join(r['panels']) or 'none'}")
    rows = [
        ("server healthy (from launch)", r["server_healthy_s"], None),
        ("page shell (from launch)", r["page_shell_s"], None),
        (f"first explanation drawn ({r['first_explanation_panel']})",
         r["first_explanation_s"], GOALS["first_explanation_s"]),
        ("all panels drawn (from launch)", r["all_panels_s"], None),
        ("K change, median", r["k_change_s"]["median"], GOALS["k_change_s"]),
        ("K change, max", r["k_change_s"]["max"], None),
        ("instance change, median", r["instance_change_s"]["median"],
         GOALS["instance_change_s"]),
        ("instance change, max", r["instance_change_s"]["max"], None),
    ]
    print(f"  {'measure':44s} {'seconds':>8s}  {'goal':>6s}")
    for name, value, goal in rows:
        verdict = "" if goal is None else (f"≤ {goal:g}  " + ("ok" if value <= goal else "MISSED"))
        print(f"  {name:44s} {value:8.2f}  {verdict}")
    for label, key in (("K change", "k_change_s"), ("instance change", "instance_change_s")):
        per = r[key]["per_panel"]
        if per:
            panels = per[0].keys()
            parts = [f"{p} {_median([run.get(p, float('nan')) for run in per]):.2f}"
                     for p in panels]
            print(f"  {label} per panel (median s): " + ", ".join(parts))
    if r["errors"]:
        print(f"  ERRORS on the page: {r['errors']}")


def register_app(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "app", help="the Streamlit app in Chromium: launch → first explanation, K and instance "
                    "changes",
        description="Start a fresh `streamlit run` server on 127.0.0.1, open the Explore page "
                    "in Debian's Chromium (Playwright) and time launch → first explanation "
                    "drawn, a K change and an instance change until the page shows the new "
                    "explanations. Uses $GEM_CACHE_DIR unless --fresh-cache.")
    p.add_argument("--fresh-cache", action="store_true",
                   help="start the server with an empty temporary engine cache")
    p.add_argument("--repeats", type=int, default=3, metavar="N",
                   help="K changes to time (default: 3)")
    p.add_argument("--positions", type=int, nargs="+", default=[1, 2, 3], metavar="POS",
                   help="test-instance positions to switch to, in order (default: 1 2 3)")
    p.add_argument("--port", type=int, default=None, help="server port (default: a free one)")
    p.add_argument("--timeout", type=float, default=180.0,
                   help="seconds to wait for any step (default: 180)")
    p.add_argument("--screenshot", metavar="PNG", default=None,
                   help="save a screenshot of the page at the end")
    add_json_arg(p)
    p.set_defaults(func=run_app)
