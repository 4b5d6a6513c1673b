"""The agent's door as a careless or hostile client meets it: a real agent, raw HTTP.

The agent runs in the test's own event loop over a real Unix socket (as root,
so every operation is reachable, operators' included). Bodies that once
answered 500, the pages of the log, and then random and hostile JSON sent to
every operation of the table (hypothesis): never a 5xx, every error one
printable line, and the agent answers a status afterwards. Real accounts
meeting the door are in tests/system/test_door_accounts.py.
"""

from __future__ import annotations

import asyncio
import json
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.agents import WAIT_S
from tpnode_tui.port.operations import OPERATIONS
from tpnode_tui.port.types.events import AuditRequest
from tpnode_tui.port.types.jobs import LaunchRequest
from tpnode_tui.port.types.reservations import ReserveRequest
from tpnode_tui.text.printable import printable


async def exchange(agent, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    """One request; the status and the first line of the answer's body (a
    stream's first line, which is all a stream is read for here)."""
    reader, writer = await asyncio.open_unix_connection(str(agent.socket), limit=2**24)
    try:
        head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        writer.write(f"{head}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        await writer.drain()
        status = int((await asyncio.wait_for(reader.readline(), WAIT_S)).split()[1])
        headers = {}
        while (line := await asyncio.wait_for(reader.readline(), WAIT_S)) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            return status, await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), WAIT_S)
        await asyncio.wait_for(reader.readline(), WAIT_S)  # a chunk's size
        return status, await asyncio.wait_for(reader.readline(), WAIT_S)
    finally:
        writer.close()


def one_printable_line(status: int, raw: bytes) -> dict:
    assert 400 <= status < 500, (status, raw[:300])
    try:
        doc = json.loads(raw)
    except ValueError:  # aiohttp's own answer to what it cannot parse at all (a request line past 8 KiB)
        assert status == 400 and raw.startswith(b"Got more than") and raw.decode("ascii").isprintable()
        return {"error": raw.decode("ascii"), "exit_code": 2, "kind": "BadRequest"}
    assert set(doc) == {"error", "exit_code", "kind"}, (status, doc)
    assert printable(doc["error"]) == doc["error"] and len(doc["error"]) <= 1000
    return doc


# ── bodies that once answered 500 ────────────────────────────────────────────


@pytest.mark.parametrize(
    "body, says",
    [
        (b"[" * 30_000 + b"]" * 30_000, "nested too deep to be read"),
        (b'{"cards": 1, "command": ' + b"[" * 30_000 + b"]" * 30_000 + b"}", "nested too deep"),
        (b'{"cards": ' + b"9" * 5000 + b', "command": ["true"]}', "holds a number that cannot be read"),
        (b'{"cards": 1, "command": ["/bin/sleep\\ud800"]}', "request.command[0] is not valid text"),
        (b'{"cards": 1, "command": ["true"], "cwd": "/tmp/\\udcff"}', "request.cwd is not valid text"),
        (b'{"cards": 1, "command": ["true"], "env": {"A": "\\ud800"}}', "request.env.A is not valid text"),
        (b'{"cards": 1, "command": ["true"], "run_id": "x\\ud800"}', "request.run_id is not valid text"),
        (b'{"cards": NaN, "command": ["true"]}', "request.cards is nan (Infinity or NaN), not a whole number"),
        (b'{"cards": 1e400, "command": ["true"]}', "(Infinity or NaN)"),
    ],
)
async def test_what_once_answered_500_is_a_4xx_and_one_line(agent, client, body, says):
    status, raw = await exchange(agent, "POST", "/v1/launch", body)
    doc = one_printable_line(status, raw)
    assert says in doc["error"] and doc["exit_code"] == 2
    assert (await client.status()).snapshot.jobs == ()  # nothing placed, and the agent answers


@pytest.mark.parametrize(
    "path, body, says",
    [
        ("/v1/reserve", {"cards": 1, "duration_s": 1e300}, "a reservation of 1e+300 s, over the limit of 366 days"),
        ("/v1/reserve", {"cards": 1, "duration_s": 10**400}, "holds a number that cannot be read"),
        ("/v1/drain", {"card": 1, "reason": "\ud800"}, "request.reason is not valid text"),
        ("/v1/stop", {"run_id": "j", "uid": 0}, "who asks is the kernel's"),
    ],
)
async def test_durations_texts_and_identities_are_read_at_the_door(agent, path, body, says):
    raw = json.dumps(body).encode() if not isinstance(body.get("duration_s"), int) else None
    if raw is None:  # a number json.dumps would write, and Python cannot read back
        raw = b'{"cards": 1, "duration_s": ' + b"1" + b"0" * 5000 + b"}"
    status, answer = await exchange(agent, "POST", path, raw)
    assert says in one_printable_line(status, answer)["error"]


async def test_a_reservation_extended_past_the_longest_is_refused_and_keeps_its_end(agent, client):
    reserved = await client.reserve(ReserveRequest(cards=1, duration_s=300 * 86400, run_id="long"))
    status, answer = await exchange(
        agent, "POST", "/v1/extend", json.dumps({"run_id": "long", "duration_s": 100 * 86400}).encode()
    )
    doc = one_printable_line(status, answer)
    assert status == 413 and "long would be held for 400.0 days from now" in doc["error"]
    assert "over the limit of 366 days (TUNEPLANE_MAX_DURATION_DAYS=366)" in doc["error"]
    [job] = (await client.status()).snapshot.jobs
    assert job.expires_at == reserved.job.expires_at
    await client.stop("long")


# ── pages of the log ─────────────────────────────────────────────────────────


async def test_the_log_is_answered_a_page_at_a_time_and_the_next_page_begins_where_it_ended(agent, client):
    for n in range(7):
        with pytest.raises(Exception, match="names no job"):
            await client.stop(f"nothing-{n}/x")
        await client.reclaim(None)  # allowed, and logged: one entry each
    status, raw = await exchange(agent, "GET", "/v1/audit?limit=5")
    first = json.loads(raw)
    assert status == 200 and len(first["entries"]) == 5 and first["more"] is True
    oldest = first["entries"][0]["time"]
    status, raw = await exchange(agent, "GET", f"/v1/audit?limit=5&before={oldest!r}")
    second = json.loads(raw)
    assert all(e["time"] < oldest for e in second["entries"]) and second["entries"]
    everything = [e["time"] for e in (await client.audit_page(AuditRequest())).entries]
    assert [e["time"] for e in second["entries"] + first["entries"]] == everything[-len(second["entries"]) - 5 :]


# ── random and hostile JSON, to every operation ──────────────────────────────

HOSTILE = st.sampled_from(
    ["\ud800", "\udcff", "\x1b]0;owned\x07", "\u202eevil", "\x00", "../../etc/passwd", "x" * 3000, "", " ", "$(id)"]
)
TEXT = st.one_of(st.text(max_size=20), HOSTILE)
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True, allow_infinity=True), st.booleans()
)
JSON = st.recursive(
    st.one_of(st.none(), NUMBERS, TEXT),
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(TEXT, kids, max_size=4)),
    max_leaves=12,
)
#: every field any operation takes, and a few that say who asks
FIELDS = sorted(
    {
        "cards",
        "command",
        "image",
        "run_id",
        "owner",
        "env",
        "cwd",
        "queue",
        "slice",
        "placement",
        "duration_s",
        "card",
        "reason",
        "pid",
        "kill",
        "dry_run",
        "started_at",
        "force",
        "uid",
        "user",
        "since",
        "limit",
        "before",
        "follow",
        "until",
        "by",
        "url",
        "node",
        "number",
    }
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
async def test_random_and_hostile_json_to_every_operation_never_answers_5xx(agent, client, data):
    op = data.draw(st.sampled_from(OPERATIONS), label="operation")
    fields = data.draw(st.dictionaries(st.one_of(st.sampled_from(FIELDS), TEXT), JSON, max_size=5), label="fields")
    if op.method == "GET":
        pairs = [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in fields.items() if k != "follow"]
        # a lone surrogate goes as the bytes it would be: percent-escapes that are not UTF-8
        query = "&".join(f"{_escaped(k)}={_escaped(v)}" for k, v in pairs)
        status, raw = await exchange(agent, "GET", op.path + (f"?{query}" if query else ""))
    else:
        body = data.draw(st.one_of(st.just(fields), JSON), label="body")
        status, raw = await exchange(agent, "POST", op.path, json.dumps(body).encode())
    assert status < 500, (op.path, status, raw[:300])
    if status >= 400:
        one_printable_line(status, raw)
    for run_id in [j.key for j in (await client.status()).snapshot.jobs if j.live]:
        await client.stop(run_id)  # what a lucky draw placed, gone before the next
    for queued in await client.queued():
        await client.cancel(queued.run_id)


def _escaped(text: str) -> str:
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


async def test_after_a_storm_of_bad_requests_the_agent_still_launches(agent, client):
    bad = [exchange(agent, "POST", "/v1/launch", b"[" * 30_000) for _ in range(40)]
    assert all(status == 400 for status, _ in await asyncio.gather(*bad))
    launched = await client.launch(LaunchRequest(cards=1, command=("sleep", "30"), run_id="after"))
    assert launched.launched is not None
    await client.stop("after")
