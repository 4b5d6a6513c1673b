"""Raw HTTP to an agent's door, sent by a real process of a test account.

A hostile account does not use the product's client: it writes whatever it
likes on the socket. These helpers run a small Python program as the account
(so the kernel names it to the agent), send the bodies given, and report each
answer's status and JSON; many requests can be made from one process, one
after another or all at once.
"""

from __future__ import annotations

import json
from typing import Any, Union

from helpers.accounts import Account, runnable

#: One account's client: reads a JSON list of [method, path, body] from stdin,
#: sends them (``parallel`` at a time, each on its own connection: as one ends,
#: the next begins), prints a JSON list of [status, doc-or-text, seconds] in
#: the same order.
_CLIENT = r"""
import json, queue, socket, sys, threading, time
path, parallel = sys.argv[1], int(sys.argv[2])
asked = json.load(sys.stdin)
answers = [None] * len(asked)

def one(n, method, target, body):
    raw = body.encode("utf-8", "surrogateescape")
    started = time.monotonic()
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(120)
    data = b""
    try:
        s.connect(path)
        try:
            s.sendall(f"{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(raw)}\r\nConnection: close\r\n\r\n".encode() + raw)
        except OSError:
            pass  # refused at the door before the request arrived: the answer is there all the same
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    except OSError as e:
        if not data:
            answers[n] = [0, f"{type(e).__name__}: {e}", time.monotonic() - started]
            return
    finally:
        s.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    if b"chunked" in head.lower():
        rest = b"".join(rest.split(b"\r\n")[1::2])
    try:
        doc = json.loads(rest)
    except ValueError:
        doc = rest.decode("utf-8", "replace")[:2000]
    answers[n] = [int(head.split()[1]), doc, time.monotonic() - started]

todo = queue.Queue()
for n, one_asked in enumerate(asked):
    todo.put((n, *one_asked))

def worker():
    while True:
        try:
            item = todo.get_nowait()
        except queue.Empty:
            return
        one(*item)

threads = [threading.Thread(target=worker) for _ in range(parallel)]
for t in threads:
    t.start()
for t in threads:
    t.join()
json.dump(answers, sys.stdout)
"""

Body = Union[str, bytes, dict, list, None]


def _text(body: Body) -> str:
    """A body as text to send: a document as JSON (a lone surrogate escaped, as JSON may carry it)."""
    if body is None:
        return ""
    if isinstance(body, bytes):
        return body.decode("utf-8", "surrogateescape")
    if isinstance(body, str):
        return body
    return json.dumps(body)


def requests_as(
    account: Account, socket_path, asked: list[tuple[str, str, Body]], *, parallel: int = 1, timeout: float = 300
) -> list[tuple[int, Any, float]]:
    """Each ``(method, path, body)`` sent by a process of ``account``; each answer's
    status, JSON (or text) and seconds, in order."""
    done = account.run(
        [runnable().python, "-c", _CLIENT, str(socket_path), str(parallel)],
        env=account.env(),
        input=json.dumps([[m, p, _text(b)] for m, p, b in asked]),
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    return [tuple(a) for a in json.loads(done.stdout)]


def request_as(account: Account, socket_path, method: str, path: str, body: Body = None) -> tuple[int, Any]:
    """One request by ``account``: its status and JSON (or text)."""
    [(status, doc, _seconds)] = requests_as(account, socket_path, [(method, path, body)])
    return status, doc
