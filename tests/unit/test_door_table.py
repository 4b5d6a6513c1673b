"""The door, read without an agent: the table of operations, each request's one parse, the limits.

Every operation is declared once (tpnode_tui/port/operations.py) and each
request is read by one parse, at the agent's door, in-process, and from the
agent's queue file. Here that parse is given what a careless or hostile
client sends, and what it accepts is written to the queue file and read back
(a property test): nothing the door takes may fail to load later. The agent
itself answering the same bodies is in tests/service/test_door_fuzz.py; real
accounts meeting it, in tests/system/test_door_accounts.py.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.callers import ALICE
from helpers.paths import CHECKOUT
from tpnode_tui.agent.api import body_json
from tpnode_tui.config.sections import LimitSettings
from tpnode_tui.model.errors import BadRequest, OverLimit, exit_code
from tpnode_tui.port import operations as ops
from tpnode_tui.port.fields import Query
from tpnode_tui.port.node import Node
from tpnode_tui.port.operations import OPERATIONS
from tpnode_tui.port.types.checks import CheckRequest
from tpnode_tui.port.types.events import AuditRequest, EventsRequest
from tpnode_tui.port.types.jobs import CancelRequest, LaunchRequest, LogsRequest, ReclaimRequest, StopRequest
from tpnode_tui.port.types.notify import NotifyAddRequest, NotifyRemoveRequest
from tpnode_tui.port.types.operators import DrainRequest, EvictRequest, UndrainRequest
from tpnode_tui.port.types.readings import HistoryRequest, Nothing, UsageRequest
from tpnode_tui.port.types.reservations import ExtendRequest, ReserveRequest, ShellRequest
from tpnode_tui.service import NodeService
from tpnode_tui.service.node import HANDLERS, handles
from tpnode_tui.state.queue import FileQueue, QueueEntry

LIMITS = LimitSettings()

#: one request of every operation, as a client makes it
SAMPLES = {
    "status": Nothing(),
    "views": Nothing(),
    "whoami": Nothing(),
    "queued": Nothing(),
    "audit": AuditRequest(since_s=3600.5, limit=10, before=1_700_000_000.25),
    "events": EventsRequest(since_s=60, card=3, limit=5),
    "follow_events": EventsRequest(since_s=60, card=3, follow=True),
    "history": HistoryRequest(2),
    "usage": UsageRequest(since=1_700_000_000.5, until=1_700_604_800.25, by="job"),
    "logs": LogsRequest("j-1", after="65536"),
    "follow_logs": LogsRequest("j-1", after="131072", follow=True),
    "launch": LaunchRequest(
        cards=2,
        command=("python", "train.py", "ünï"),
        run_id="j-1",
        env=(("PATH", "/usr/bin"), ("HF_TOKEN", "s3cret")),
        cwd="/home/alice",
        queue=True,
        placement="same-switch",
    ),
    "reserve": ReserveRequest(cards=1, duration_s=3600, run_id="r-1", slice="1g.18gb"),
    "extend": ExtendRequest("r-1", 1800),
    "stop": StopRequest("j-1"),
    "shell": ShellRequest("r-1", seen_pid=4242, seen_start_ticks=123456),
    "reclaim": ReclaimRequest(None),
    "cancel": CancelRequest("j-1"),
    "notify_list": Nothing(),
    "notify_add": NotifyAddRequest("ntfy://user:s3cret@ntfy.example/topic", node=True),
    "notify_remove": NotifyRemoveRequest(2),
    "drain": DrainRequest(3, "fan failing"),
    "undrain": UndrainRequest(3, force=True),
    "check": CheckRequest(3),
    "evict": EvictRequest(1, 4242, kill=True, started_at=1_700_000_000.5),
}


def read(op, sent) -> object:
    """What the door makes of ``sent`` for ``op``: a POST's body, or a GET's query pairs."""
    source = Query.of(list(sent.items()), op.path) if op.method == "GET" else sent
    return op.read(source, LIMITS)


# ── the table ────────────────────────────────────────────────────────────────


def test_every_operation_has_one_handler_a_method_of_the_service():
    names = [op.name for op in OPERATIONS]
    assert len(set(names)) == len(names) and set(SAMPLES) == set(names)
    assert set(HANDLERS) == set(names)
    for op in OPERATIONS:
        handler = HANDLERS[op.name]
        # bound to a method of the service, and to no other operation
        assert vars(NodeService)[handler.__name__] is handler, op.name
        assert op.who in ("anyone", "owner or operator", "operators") and op.says
    assert len({id(h) for h in HANDLERS.values()}) == len(names)


def test_a_second_handler_for_an_operation_is_refused_as_the_service_loads():
    with pytest.raises(TypeError, match="status has two handlers"):
        handles(ops.STATUS)(NodeService.whoami)
    assert HANDLERS["status"] is vars(NodeService)["status"]


def test_the_service_does_an_operation_by_its_handler_not_by_a_method_of_its_name():
    """The service is reached only through the table's bindings: a method that
    shares an operation's name and is not its handler is never called."""
    source = (CHECKOUT / "tpnode_tui" / "service" / "node.py").read_text()
    tree = ast.parse(source)
    do = next(f for f in ast.walk(tree) if isinstance(f, ast.AsyncFunctionDef) and f.name == "do")
    called = {ast.unparse(c.func) for c in ast.walk(do) if isinstance(c, ast.Call)}
    assert "HANDLERS[op.name]" in called and not any(name.startswith("getattr") for name in called)


def _asked_by(cls: type) -> dict[str, set[str]]:
    """Each method of ``cls`` and the operations of the table it names (``ops.X``)."""
    tree = ast.parse(inspect.getsource(cls))
    found: dict[str, set[str]] = {}
    for f in ast.walk(tree):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[f.name] = {
                n.attr for n in ast.walk(f) if isinstance(n, ast.Attribute) and ast.unparse(n.value) == "ops"
            }
    return found


def test_every_operation_is_a_call_of_the_port_written_once_over_call_and_stream():
    """The Node's calls are each one line over its generic ``call`` or ``stream``:
    every operation is asked by exactly one of them, but for whoami (how a client
    checks that an agent answers) and shell (asked with ``call`` by the command
    that moves itself into a fence)."""
    asked = _asked_by(Node)
    constants = {name: op for name, op in vars(ops).items() if isinstance(op, ops.Operation)}
    assert set(constants.values()) == set(OPERATIONS)
    by_op = Counter(name for names in asked.values() for name in names)
    assert set(by_op) == set(constants) - {"WHOAMI", "SHELL"}
    assert all(n == 1 for n in by_op.values()), by_op
    for method, names in asked.items():
        for name in names:
            assert method == constants[name].name or method.endswith("_page"), (method, name)


def test_each_path_is_one_route_and_two_on_one_path_are_told_apart_by_the_request():
    routes = Counter((op.method, op.path) for op in OPERATIONS)
    assert [route for route, n in routes.items() if n > 1] == [("GET", "/v1/events"), ("GET", "/v1/logs")]
    asked = EventsRequest(follow=True)
    assert [op.name for op in OPERATIONS if op.path == "/v1/events" and op.selects(asked)] == ["follow_events"]
    assert [op.name for op in OPERATIONS if op.path == "/v1/events" and op.selects(EventsRequest())] == ["events"]
    following = LogsRequest("j", follow=True)
    assert [op.name for op in OPERATIONS if op.path == "/v1/logs" and op.selects(following)] == ["follow_logs"]
    assert [op.name for op in OPERATIONS if op.path == "/v1/logs" and op.selects(LogsRequest("j"))] == ["logs"]


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: op.name)
def test_every_request_reads_back_as_itself_from_what_its_client_sends(op):
    request = SAMPLES[op.name]
    assert op.read(op.echoed(request), LIMITS) == request
    path, body = op.sent(request)
    assert path.startswith(op.path) and (body is None) == (op.method == "GET")


def test_the_docs_list_every_operation_with_who_may():
    """docs/architecture.md's table of the door is the table's: a route added here
    and not there (or the other way) fails."""
    text = (CHECKOUT / "docs" / "architecture.md").read_text()
    rows = {(m, p, who) for m, p, who in re.findall(r"^\| `(GET|POST) (\S+?)` \| .*? \| (.+?) \|$", text, re.M)}
    assert rows == {(op.method, op.path + ("?follow=true" if op.follow else ""), op.who) for op in OPERATIONS}


# ── what is refused, and how ─────────────────────────────────────────────────


HUGE = 10**30


@pytest.mark.parametrize(
    "op, body, says",
    [
        (ops.LAUNCH, {"cards": 1, "command": ["/bin/sleep\ud800"]}, "request.command[0] is not valid text"),
        (ops.LAUNCH, {"cards": 1, "command": ["/bin/sleep\x00x"]}, "holds a NUL character"),
        (ops.LAUNCH, {"cards": 1, "command": ["x"], "env": {"A": "\udcff"}}, "request.env.A is not valid text"),
        (ops.LAUNCH, {"cards": 1, "command": ["x"], "env": {"\ud800": "v"}}, "is not valid text"),
        (ops.LAUNCH, {"cards": 1, "command": ["x"], "env": {"A=B": "v"}}, "'A=B' is not valid"),
        (ops.LAUNCH, {"cards": 1, "command": ["x"], "cwd": "/tmp/\ud800"}, "request.cwd is not valid text"),
        (ops.LAUNCH, {"cards": 1, "command": ["x"], "cwd": "tmp"}, "'tmp' is not an absolute path"),
        (ops.LAUNCH, {"cards": 1, "command": ["x"], "run_id": "a\ud800"}, "request.run_id is not valid text"),
        (ops.LAUNCH, {"cards": 1, "command": ["x"], "owner": "\ud800"}, "request.owner is not valid text"),
        (ops.LAUNCH, {"cards": 1, "command": ["x"], "slice": "not a profile"}, "is not a MIG profile"),
        (ops.LAUNCH, {"cards": 0, "command": ["x"]}, "a job needs at least 1 card, not 0"),
        (ops.LAUNCH, {"cards": True, "command": ["x"]}, "request.cards is true/false, not a whole number"),
        (ops.LAUNCH, {"cards": 1, "command": ["x"], "uid": 0}, "who asks is the kernel's"),
        (ops.STOP, {"run_id": "j", "uid": 0, "user": "root"}, "who asks is the kernel's"),
        (ops.STOP, {"run_id": "../etc"}, "'../etc' names no job"),
        (ops.RESERVE, {"cards": 1, "duration_s": 0.5}, "a reservation lasts at least 1 second, not 0.5"),
        (ops.RESERVE, {"cards": 1, "duration_s": float("nan")}, "request.duration_s is nan (Infinity or NaN)"),
        (ops.EXTEND, {"run_id": "r", "duration_s": float("inf")}, "(Infinity or NaN)"),
        (ops.DRAIN, {"card": 1, "reason": " \t"}, "say why the card is drained"),
        (ops.DRAIN, {"card": 1, "reason": "\ud800"}, "request.reason is not valid text"),
        (ops.DRAIN, {"card": HUGE, "reason": "x"}, "request.card is 10000000000000000..., not a card index"),
        (ops.EVICT, {"card": 1, "pid": 2**40}, "request.pid is 1099511627776, not a process id"),
        (ops.NOTIFY_ADD, {"url": " "}, "give the URL to be told at"),
        (ops.NOTIFY_ADD, {"url": "json://h/\x1b[2J"}, "the URL holds a control character"),
        (ops.NOTIFY_ADD, {"url": "json://h/" + "x" * 3000}, "the URL is 3009 characters, more than"),
        (ops.NOTIFY_REMOVE, {"number": 0}, "request.number is 0, not a URL's number as notify list gives it"),
    ],
)
def test_a_request_a_program_could_not_take_is_refused_in_one_line(op, body, says):
    with pytest.raises(BadRequest) as refused:
        read(op, json.loads(json.dumps(body)))
    message = str(refused.value)
    assert says in message and "\n" not in message and exit_code(refused.value) == 2
    assert "\ud800" not in message and "\udcff" not in message and "\x00" not in message  # echoed printable


@pytest.mark.parametrize(
    "op, body, says",
    [
        (
            ops.LAUNCH,
            {"cards": 1, "command": ["x"] * 513},
            "the command has 513 words, over the limit of 512 (TUNEPLANE_MAX_COMMAND_ARGS=512)",
        ),
        (
            ops.LAUNCH,
            {"cards": 1, "command": ["/bin/sleep", "x" * 60_000]},
            "the command is 58.6 KiB, over the limit of 16 KiB (TUNEPLANE_MAX_COMMAND_KIB=16)",
        ),
        (
            ops.LAUNCH,
            {"cards": 1, "command": ["x"], "env": {f"V{n}": "1" for n in range(300)}},
            "the environment has 300 variables, over the limit of 256 (TUNEPLANE_MAX_ENV_VARS=256)",
        ),
        (
            ops.LAUNCH,
            {"cards": 1, "command": ["x"], "env": {"BIG": "x" * 60_000}},
            "the environment is 58.6 KiB, over the limit of 32 KiB (TUNEPLANE_MAX_ENV_KIB=32)",
        ),
        (
            ops.LAUNCH,
            {"cards": 1, "command": ["x"], "cwd": "/" + "d" * 5000},
            "the working directory is 5001 bytes, over the limit of 4096 bytes (TUNEPLANE_MAX_CWD_BYTES=4096)",
        ),
        (
            ops.DRAIN,
            {"card": 1, "reason": "r" * 501},
            "the reason is 501 characters, over the limit of 500 (TUNEPLANE_MAX_REASON_CHARS=500)",
        ),
        (
            ops.RESERVE,
            {"cards": 1, "duration_s": 1e300},
            "a reservation of 1e+300 s, over the limit of 366 days (TUNEPLANE_MAX_DURATION_DAYS=366)",
        ),
        (
            ops.EXTEND,
            {"run_id": "r", "duration_s": 367 * 86400},
            "an extension of 31708800 s, over the limit of 366 days (TUNEPLANE_MAX_DURATION_DAYS=366)",
        ),
    ],
)
def test_a_request_over_a_limit_names_the_limit_and_its_setting(op, body, says):
    with pytest.raises(OverLimit) as refused:
        read(op, body)
    assert str(refused.value) == says
    assert exit_code(refused.value) == 2


def test_the_same_request_within_every_limit_is_taken():
    body = {
        "cards": 1,
        "command": ["x"] * 512,
        "env": {f"V{n}": "1" for n in range(256)},
        "cwd": "/" + "d" * 4095,
        "queue": True,
    }
    assert read(ops.LAUNCH, body).cards == 1
    assert read(ops.RESERVE, {"cards": 1, "duration_s": 366 * 86400}).duration_s == 366 * 86400


@pytest.mark.parametrize(
    "op, pairs, says",
    [
        (ops.EVENTS, [("card", "1"), ("card", "2")], "/v1/events was given 'card' more than once"),
        (ops.EVENTS, [("since", "1e3")], "since='1e3' is not a number of seconds"),
        (ops.EVENTS, [("before", "nan")], "before='nan' is not a time"),
        (ops.EVENTS, [("limit", "0")], "limit='0' is not a number of entries"),
        (ops.AUDIT, [("card", "1")], "/v1/audit does not take card; it takes since, limit, before"),
        (ops.STATUS, [("x", "\x1b[2J")], "/v1/snapshot does not take x; it takes no parameters"),
        (ops.USAGE, [("until", "1700000000")], "/v1/usage needs since: a time, in unix seconds"),
        (ops.USAGE, [("since", "1700000000")], "/v1/usage needs until: a time, in unix seconds"),
        (ops.USAGE, [("since", "2e9"), ("until", "3e9")], "since='2e9' is not a time (unix seconds)"),
        (ops.USAGE, [("since", "-5"), ("until", "10")], "since='-5' is not a time from 1970 to 9999"),
        (ops.USAGE, [("since", "0"), ("until", "1" + "0" * 20)], "until='100000000000000000000' is not a time from"),
        (
            ops.USAGE,
            [("since", "1700000100"), ("until", "1700000000")],
            "since (1700000100) is not before until (1700000000): a span ends after it starts",
        ),
        (ops.USAGE, [("since", "1"), ("until", "2"), ("by", "account")], "by='account' is not one of user, card, job"),
        (ops.USAGE, [("since", "1"), ("until", "2"), ("uid", "0")], "/v1/usage does not take uid; it takes since"),
    ],
)
def test_a_query_is_read_as_strictly_as_a_body(op, pairs, says):
    with pytest.raises(BadRequest, match=re.escape(says)):
        op.read(Query.of(pairs, op.path), LIMITS)


def test_a_usage_request_without_by_is_by_account():
    asked = ops.USAGE.read(Query.of([("since", "100"), ("until", "200.5")], "/v1/usage"), LIMITS)
    assert asked == UsageRequest(100.0, 200.5, "user")


def test_a_page_asked_larger_than_the_nodes_is_the_nodes():
    asked = ops.AUDIT.read(Query.of([("limit", "999999999")], "/v1/audit"), LIMITS)
    assert asked.limit == LIMITS.page


@pytest.mark.parametrize(
    "raw, says",
    [
        (b"[" * 30_000 + b"]" * 30_000, "nested too deep to be read"),
        (b'{"cards": ' + b"9" * 5000 + b"}", "holds a number that cannot be read"),
        (b'{"cards": 1, "command": ["\\ud800"]}', None),  # JSON may carry a lone surrogate: the parse refuses it
        (b"\xff\xfe", "not UTF-8 text"),
        (b"{not json", "is not valid JSON"),
    ],
)
def test_a_body_python_cannot_read_is_a_bad_request_not_a_crash(raw, says):
    if says is None:
        with pytest.raises(BadRequest, match="is not valid text"):
            ops.LAUNCH.read(body_json(raw), LIMITS)
        return
    with pytest.raises(BadRequest, match=says):
        body_json(raw)


@pytest.mark.parametrize(
    "raw, key",
    [
        (b'{"cards": 1, "cards": 2, "command": ["true"]}', "cards"),
        (b'{"cards": 1, "command": ["true"], "env": {"A": "1", "A": "2"}}', "A"),
        (b'{"cards": 1, "command": [{"x": [{"y": 1, "y": 1}]}]}', "y"),
        (b'{"cards": 1, "command": ["true"], "\\ud800": 1, "\\ud800": 2}', "\\ud800"),
    ],
)
def test_a_key_given_twice_in_one_object_is_refused_at_any_depth(raw, key):
    """JSON's reader keeps the last of a key given twice: {"cards": 1, "cards": 2} launched 2 cards."""
    with pytest.raises(BadRequest, match=re.escape(f"the request body gives '{key}' more than once in one object")):
        body_json(raw)


def test_one_key_in_two_objects_is_two_keys():
    assert body_json(b'{"env": {"env": "1"}, "cards": 1}') == {"env": {"env": "1"}, "cards": 1}


# ── what the door takes, the queue keeps ─────────────────────────────────────

_TEXT = st.text(max_size=12)
_WORDS = st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=6)
_NAMES = st.text(st.characters(blacklist_characters="="), min_size=1, max_size=10)

_LAUNCH_BODIES = st.fixed_dictionaries(
    {"cards": st.integers(min_value=-2, max_value=70_000), "command": _WORDS},
    optional={
        "image": st.one_of(st.none(), _TEXT),
        "run_id": st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", fullmatch=True), _TEXT),
        "owner": _TEXT,
        "env": st.one_of(st.none(), st.dictionaries(_NAMES, st.text(max_size=30), max_size=5)),
        "cwd": st.one_of(st.none(), st.text(max_size=20).map(lambda t: "/" + t), _TEXT),
        "queue": st.booleans(),
        "slice": st.one_of(st.none(), st.sampled_from(["1g.18gb", "2g.35gb", "1c.3g.71gb", "1g 18gb"])),
        "placement": st.one_of(st.none(), st.sampled_from(["same-switch", "contiguous", "nearby"])),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_LAUNCH_BODIES, queued_at=st.floats(min_value=0, max_value=4e9))
def test_every_launch_the_door_takes_is_read_back_from_the_queue_file_as_itself(body, queued_at):
    try:
        request = ops.LAUNCH.read(json.loads(json.dumps(body)), LIMITS)
    except BadRequest:
        return  # refused at the door: never queued
    if request.run_id is None:
        request = LaunchRequest(**{**request.__dict__, "run_id": "generated-1"})
    entry = QueueEntry(request, ALICE, queued_at)
    with tempfile.TemporaryDirectory() as state:
        FileQueue(Path(state)).add(entry)
        assert FileQueue(Path(state)).entries() == [entry]
