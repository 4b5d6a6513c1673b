"""``status --json`` through this machine's agent, for the cost of a Python start.

The agent already wrote the document (``GET /v1/snapshot``: the snapshot, who
asks, ``via``); the command only has to hand it on. Reading it back into the
model to write it out again cost seven Python starts of imports (the settings,
the port's types, dataclasses, typing), so this path asks with a plain socket
and the standard library's JSON, and imports nothing else of the product.

It takes only the plainest case: the command line exactly ``status --json``,
no ``TUNEPLANE_HOST``, ``TUNEPLANE_AGENT`` unset, ``auto`` or ``on``, and an
answer 200 with a JSON object framed by its Content-Length. Anything else
(no agent answers, a refusal, an error, another framing) returns None, and the
ordinary path runs as before, so every error, refusal and fallback to serving
the node here keeps its wording and exit code; a GET changes nothing, so
asking twice is safe. The settings a status through the agent does not use
(the probe, the runtime, the state dir, ...) are not read here: the agent's
own are the ones that count.

Re-encoding with :func:`json.dumps` (ASCII only) keeps the output printable
whatever the agent's document holds, and as the ordinary path writes it.
"""

from __future__ import annotations

import json
import os
import sys

#: as :mod:`tpnode_tui.config.sections` declares TUNEPLANE_AGENT_SOCKET's default
from tpnode_tui.config.defaults import DEFAULT_AGENT_SOCKET
from tpnode_tui.config.nodefile import beneath
from tpnode_tui.host.dial import connect_unix
from tpnode_tui.model.errors import ConfigError

TYPE_CHECKING = False  # typing is one of the imports this path does without
if TYPE_CHECKING:
    from typing import Optional

#: the most of an answer read (as the agent's client, tpnode_tui.node.http)
MAX_BODY = 64 * 1024 * 1024
#: a connection not made within this long (the agent's queue full all along) is the ordinary path's to report
CONNECT_TIMEOUT_S = 5.0

_REQUEST = b"GET /v1/snapshot HTTP/1.1\r\nHost: tpnode-agent\r\nAccept: application/json\r\nConnection: close\r\n\r\n"


def agent_socket() -> Optional[str]:
    """The agent's socket, where the settings would choose this machine's agent
    first; None where they might not (another node, no agent, or a value the
    ordinary path must read and judge)."""
    try:
        environ = beneath(os.environ)  # the node's own file beneath, as the settings read it
    except ConfigError:  # a file that cannot be read: the ordinary path says so
        return None
    if environ.get("TUNEPLANE_HOST", "").strip():
        return None
    if environ.get("TUNEPLANE_AGENT", "").strip().lower() not in ("", "auto", "on"):
        return None
    path = environ.get("TUNEPLANE_AGENT_SOCKET", "")  # taken as written, as the settings take it
    return os.path.expanduser(path) if path.strip() else DEFAULT_AGENT_SOCKET


def fetch(path: str) -> Optional[bytes]:
    """The body of the agent's 200 answer to a status, or None."""
    try:
        # a full queue waited on, as the agent's client does; the answer takes as long as it takes
        sock = connect_unix(path, CONNECT_TIMEOUT_S)
    except OSError:
        return None
    try:
        sock.sendall(_REQUEST)
        with sock.makefile("rb") as answer:
            if not answer.readline(4096).startswith((b"HTTP/1.1 200 ", b"HTTP/1.0 200 ")):
                return None
            length = None
            while (line := answer.readline(65536).strip()) != b"":
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length" and value.strip().isdigit():
                    length = int(value)
                elif name == b"transfer-encoding":
                    return None
            if length is None or length > MAX_BODY:
                return None
            body = answer.read(length)
            return body if len(body) == length else None
    except OSError:
        return None
    finally:
        sock.close()


def status_json() -> Optional[int]:
    """Print the agent's status document and return 0; None: not this way."""
    path = agent_socket()
    body = None if path is None else fetch(path)
    if body is None:
        return None
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    doc["state_dir_note"] = None  # the agent's node: this process has no state dir to speak of
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    sys.stdout.flush()
    return 0
