"""The app starts as a real server (headless, offline) and answers its health check."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

from .conftest import APP


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_streamlit_server_starts_and_is_healthy():
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(APP), "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1"],
        cwd=APP.parent.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=os.environ.copy(), text=True)
    try:
        deadline = time.time() + 90
        body = ""
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health",
                                            timeout=2) as resp:
                    body = resp.read().decode()
                    break
            except OSError:
                if proc.poll() is not None:
                    break
                time.sleep(0.5)
        assert body == "ok", proc.stdout.read() if proc.poll() is not None else body
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
            assert resp.status == 200
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
