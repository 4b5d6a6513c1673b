"""``status --json`` through the agent stays a Python start: what keeps it fast, checked without a clock.

The quick path (tpnode_tui/node/choose.py's quick_status) hands on the document the agent
wrote. It is fast because of what it does not import, so that is what is
checked, from ``python -X importtime`` of a real run against a real agent:
none of the dashboard's, the agent's or the node's libraries, and none of
what building the model costs (the settings, the port's types, dataclasses,
typing, argparse). How fast it is goes in bench/startup_compare.py and
docs/benchmarks.md. Everything but the plain case takes the ordinary path, so
its answers and refusals read as they always did.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading

#: what the quick path must never load: together, most of the seven Python starts the ordinary path cost
NOT_IMPORTED = {
    "textual",
    "aiohttp",
    "aiodocker",
    "pynvml",
    "redis",
    "asyncio",
    "argparse",
    "dataclasses",
    "typing",
    "tpnode_tui.config.settings",
    "tpnode_tui.config.sections",
    "tpnode_tui.port",
    "tpnode_tui.node.remote",
    "tpnode_tui.node.http",
    "tpnode_tui.cli.registry",
    "tpnode_tui.cli.commands",
}
#: of the model, only its errors may come (plain exception classes that import nothing)
MODEL_ALLOWED = {"tpnode_tui.model", "tpnode_tui.model.errors"}


def run(socket_path, *args: str, flags: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, with this machine's agent at ``socket_path``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    return subprocess.run(
        [sys.executable, *flags, "-m", "tpnode_tui", *args],
        capture_output=True,
        text=True,
        env={**base, "TUNEPLANE_AGENT_SOCKET": str(socket_path), **env},
        timeout=60,
    )


def imported(stderr: str) -> set[str]:
    """The modules ``python -X importtime`` says were imported."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


async def test_status_json_through_the_agent_imports_none_of_the_model(agent):
    done = await asyncio.to_thread(run, agent.socket, "status", "--json", flags=("-X", "importtime"))
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = imported(done.stderr)
    assert "tpnode_tui.node.choose" in loaded  # the quick path was taken
    assert loaded & NOT_IMPORTED == set()
    assert not [m for m in loaded if m.split(".")[0] in NOT_IMPORTED]
    assert {m for m in loaded if m.startswith("tpnode_tui.model")} <= MODEL_ALLOWED
    doc = json.loads(done.stdout)
    assert doc["via"] == "agent" and len(doc["cards"]) == 8 and doc["state_dir_note"] is None


async def test_the_quick_path_prints_what_the_ordinary_path_prints(agent):
    """The same document, key for key, as ``--agent on status --json`` (which
    reads it into the model and writes it out again) prints of a reading made
    just before or just after: readings change as the agent starts its watches."""
    before = await asyncio.to_thread(run, agent.socket, "--agent", "on", "status", "--json")
    quick = await asyncio.to_thread(run, agent.socket, "status", "--json")
    after = await asyncio.to_thread(run, agent.socket, "--agent", "on", "status", "--json")
    for done in (before, quick, after):
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert quick.stdout.startswith('{\n  "version": ') and quick.stdout.isascii()
    docs = [json.loads(done.stdout) for done in (before, quick, after)]
    assert list(docs[1]) == list(docs[0]) == list(docs[2])  # the same keys in the same order, the note last
    for doc in docs:  # readings differ by when they were taken
        doc.pop("taken_at")
        for card in doc["cards"]:
            card.pop("sampled_at", None)
    assert docs[1] in (docs[0], docs[2])


def test_no_agent_is_said_as_before_when_the_agent_is_asked_for(tmp_path):
    gone = tmp_path / "no-agent.sock"
    quick = run(gone, "status", "--json", TUNEPLANE_AGENT="on")
    ordinary = run(gone, "--agent", "on", "status", "--json")
    assert quick.returncode == ordinary.returncode == 1
    assert quick.stderr == ordinary.stderr and quick.stderr.startswith(f"tpnode-tui: no agent answers at {gone}")
    assert quick.stdout == ""


def test_a_refusal_takes_the_ordinary_path_and_keeps_its_words_and_exit_code(tmp_path):
    """An agent that refuses every request (as one would refuse this account):
    the quick path hands over, and the refusal is said once, with its code."""
    path = str(tmp_path / "refusing.sock")
    body = json.dumps({"error": "this account may not read this node", "exit_code": 77, "kind": "NotAllowed"}).encode()
    answer = b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    asked: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                asked.append(conn.recv(65536).split(b"\r\n", 1)[0])
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    try:
        done = run(path, "status", "--json")
    finally:
        server.close()
    assert (done.returncode, done.stdout) == (77, "")
    assert done.stderr == "tpnode-tui: this account may not read this node\n"
    assert asked[0] == b"GET /v1/snapshot HTTP/1.1"  # the quick path asked first, then handed over


async def test_the_quick_path_finds_the_agent_the_node_s_file_names(agent, tmp_path):
    """A socket given only in the node's own file (as sshd's non-login shells
    and every account see it) is the one asked, as the settings would ask it."""
    node_file = tmp_path / "agent.env"
    node_file.write_text(f"TUNEPLANE_AGENT_SOCKET={agent.socket}\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-X", "importtime", "-m", "tpnode_tui", "status", "--json"],
        capture_output=True,
        text=True,
        env={**base, "TUNEPLANE_NODE_ENV_FILE": str(node_file), "TUNEPLANE_AGENT": "on"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tpnode_tui.node.remote" not in imported(done.stderr)  # answered by the quick path, not the ordinary one
    assert json.loads(done.stdout)["via"] == "agent"


def _agent_answering(path: str, answers: dict[bytes, bytes], asked: list[bytes]) -> socket.socket:
    """A stand-in agent at ``path``: each request's path (without its query) answered
    200 with its JSON, on a connection kept open for as long as the client keeps it."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)

    def talk(conn: socket.socket) -> None:
        with conn:
            pending = b""
            while True:
                while b"\r\n\r\n" not in pending:
                    got = conn.recv(65536)
                    if not got:
                        return
                    pending += got
                head, pending = pending.split(b"\r\n\r\n", 1)
                line = head.split(b"\r\n", 1)[0]
                asked.append(line)
                body = answers[line.split(b" ")[1].split(b"?")[0]]
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(body), body)
                )

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=talk, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_usage_json_is_handed_on_exactly_as_the_agent_wrote_it(tmp_path):
    """``usage --json`` prints the agent's document itself (read back strictly
    first), as ``status --json`` does: not the client's model of it written out
    again, which would put the agent's keys in the client's order."""
    from tpnode_tui.model.usage import UsageFigures, UsageReport
    from tpnode_tui.port.usage import usage_to_json

    report = UsageReport(1_700_000_000.0, 1_700_086_400.0, "user", (), UsageFigures(held_card_hours=2.5), False, 90)
    written = dict(reversed(usage_to_json(report).items()))  # the agent's own order, not the client's
    you = {"user": "alice", "uid": 1000, "operator": False, "cards_held": 0, "operators": "root", "pid": 1}
    asked: list[bytes] = []
    path = str(tmp_path / "agent.sock")
    server = _agent_answering(
        path, {b"/v1/whoami": json.dumps(you).encode(), b"/v1/usage": json.dumps(written).encode()}, asked
    )
    try:
        done = run(path, "usage", "--json", "--since", "2023-11-14", "--until", "2023-11-15")
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout == json.dumps(written, indent=2) + "\n"
    assert [line.split(b" ")[1].split(b"?")[0] for line in asked] == [b"/v1/whoami", b"/v1/usage"]
