"""``tpnode-tui web`` for the tests: run as a real account (it refuses root), on a free port of its own."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

from helpers.accounts import Account, runnable
from helpers.services import free_port
from helpers.waiting import until

#: how long the page's server may take to start, or to stop
BOUND_S = 60.0


class WebPage:
    """The page's server, as ``account`` with ``env``, serving ``args`` (``--fleet``, ``--demo``)."""

    def __init__(self, account: Account, env: dict[str, str], *args: str, port: Optional[int] = None) -> None:
        self.account = account
        self.env = env
        self.args = args
        self.port = port or free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.log = Path(f"/tmp/tpn-web-{self.port}.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> WebPage:
        with open(self.log, "ab") as log:
            self.proc = self.account.spawn(
                runnable().argv("web", *self.args, "--listen", f"127.0.0.1:{self.port}"),
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        until(
            lambda: self._listening() or self.proc.poll() is not None,
            "the page's server to listen",
            BOUND_S,
            show=self.said,
        )
        assert self.proc.poll() is None, self.said()
        return self

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def said(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(BOUND_S)
        self.proc = None

    def close(self) -> None:
        self.stop()
        self.log.unlink(missing_ok=True)

    def get(self, path: str, method: str = "GET", headers: Optional[dict[str, str]] = None) -> tuple[int, bytes]:
        """One request; its status and body (an error status is an answer too)."""
        request = urllib.request.Request(self.url + path.lstrip("/"), method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def state(self) -> dict:
        status, body = self.get("api/state.json")
        assert status == 200, body
        return json.loads(body)
