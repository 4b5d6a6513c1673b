"""The fleet view: what an operator sees and can do, by pilot and as SVG snapshots at 120x40.

The fleet is made of publications as agents write them (the real builder),
decoded by the real decoder and judged by the real rules; the only stand-in
is the source that hands them to the app instead of Redis. Times, the clock
and the time zone are fixed, so the pictures are the same on every machine.
Update with --snapshot-update and look at the result before committing it.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from textual.widgets import DataTable

from helpers.fleet import T, job, node_snapshot, publication_bytes, registration_bytes
from helpers.waiting import until_pilot
from tpnode_tui.fleet import record
from tpnode_tui.fleet.reader import FleetUnavailable
from tpnode_tui.port.wire.reader import WireError
from tpnode_tui.tui.fleet.app import FleetApp
from tpnode_tui.tui.fleet.screens.node import NodeScreen
from tpnode_tui.tui.widgets.tiles import CardGrid

SIZE = (120, 40)
NOW = T + 0.5


def fleet_of(nodes: dict[str, tuple[bytes, bytes | None]], now: float = NOW, remembered=None) -> record.FleetPicture:
    """``nodes``: instance -> (registration, publication or None)."""
    decoder = record.Decoder()
    regs, pubs, broken = {}, {}, {}
    for instance, (reg, doc) in nodes.items():
        regs[instance] = record.decode_registration(instance, reg)
        if doc is None:
            continue
        try:
            pubs[instance] = decoder.decode(instance, doc)
        except WireError as e:
            broken[instance] = str(e)
    return record.assemble(regs, pubs, broken, now, remembered=remembered)


def up(name: str, snap, **kw) -> tuple[bytes, bytes]:
    return registration_bytes(name, total=snap.occupancy.total), publication_bytes(name, name, snap, **kw)


def mixed_fleet() -> record.FleetPicture:
    busy = node_snapshot(
        jobs=(job("llama-70b", (0, 1, 2, 3)), job("rsv-alice", (6,), kind="reservation")), external=(5,)
    )
    nodes = {
        "gpu-01": up("gpu-01", busy),
        "gpu-02": up(
            "gpu-02", node_snapshot(jobs=(job("eval", (0, 1)),), unhealthy=(7,), drained=(6,)), intruders={1: [31337]}
        ),
        "gpu-03": up("gpu-03", node_snapshot(4, jobs=(job("j", (0,)),))),
        "gpu-04": (registration_bytes("gpu-04", total=8, started_at=T - 7200), None),
        "gpu-05": up("gpu-05", node_snapshot(blind=True)),
        "gpu-06": (registration_bytes("gpu-06"), b'{"fleet": 1, "instance": "gpu-06", "snapshot": []}'),
        "gpu-07": up("gpu-07", node_snapshot(jobs=(job("a", (0, 1)), job("b", (6, 7))))),
        "gpu-08": up("gpu-08", node_snapshot(), error="cannot read the state file /var/lib/tpnode-tui/jobs.json"),
        "big-64": up("big-64", node_snapshot(64, jobs=(job("huge", tuple(range(0, 48))),), external=(50,))),
        "twin-a": (
            registration_bytes("twin", host="rack1-n3", pid=4101),
            publication_bytes("twin", "twin-a", node_snapshot()),
        ),
        "twin-b": (
            registration_bytes("twin", host="rack4-n9", pid=977),
            publication_bytes("twin", "twin-b", node_snapshot()),
        ),
    }
    return fleet_of(nodes, remembered={"gpu-04": T - 95})


class FixedFleet:
    """Hands the app prepared pictures, one per read (the last one again once used up)."""

    safe_url = "redis://fleet.example:6379/0"

    def __init__(self, *pictures) -> None:
        self.pictures = list(pictures)
        self.reads = 0

    async def read(self) -> record.FleetPicture:
        self.reads += 1
        picture = self.pictures[0] if len(self.pictures) == 1 else self.pictures.pop(0)
        if isinstance(picture, Exception):
            raise picture
        return picture

    async def notices(self):
        await asyncio.Event().wait()
        yield None

    async def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def fixed_zone(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def app_for(*pictures, interval: float = 60) -> FleetApp:
    return FleetApp(FixedFleet(*pictures), interval=interval, clock=lambda: NOW)


async def first_read(pilot) -> None:
    await until_pilot(pilot, lambda: pilot.app.reads >= 1, "the first read", every=0.02)
    await pilot.pause(0.05)


def reads(n: int):
    async def wait(pilot) -> None:
        while pilot.app.reads < n:
            pilot.app.follower.wake()
            await pilot.pause(0.05)
        await pilot.pause(0.05)

    return wait


def cell(app: FleetApp, name: str, column: str) -> str:
    return app.query_one(DataTable).get_cell(name, column).plain


# ── by pilot ──────────────────────────────────────────────────────────────────


async def test_one_row_per_node_sorted_and_nothing_unknown_counted_free():
    app = app_for(mixed_fleet())
    async with app.run_test(size=SIZE) as pilot:
        await first_read(pilot)
        table = app.query_one(DataTable)
        names = [str(k.value) for k in table.rows]
        assert names == sorted(names) and len(names) == 10  # the twins are one (conflicting) row
        assert cell(app, "gpu-01", "free") == "2/8" and cell(app, "gpu-01", "window") == "1"
        assert cell(app, "gpu-02", "unhealthy") == "1" and cell(app, "gpu-02", "drained") == "1"
        assert cell(app, "gpu-02", "intruders") == "1"
        assert cell(app, "gpu-04", "free") == "?/8" and cell(app, "gpu-04", "seen") == "unreachable since 11:58:25"
        assert cell(app, "gpu-04", "strip") == "?" * 8
        assert cell(app, "gpu-05", "free") == "0/8"  # unverified is not free
        for name, status in (("gpu-06", "malformed"), ("gpu-08", "stale"), ("twin", "conflict")):
            assert cell(app, name, "free").startswith("?/") and cell(app, name, "seen") == status
        summary = app.query_one("#fleet-summary").content.plain
        assert "10 nodes: 6 up, 4 down" in summary
        assert "big-64: 13 consecutive free cards" in summary


async def test_filter_narrows_the_rows_and_escape_brings_them_back():
    app = app_for(mixed_fleet())
    async with app.run_test(size=SIZE) as pilot:
        await first_read(pilot)
        await pilot.press("slash", "g", "p", "u", "-", "0", "4")
        assert [str(k.value) for k in app.query_one(DataTable).rows] == ["gpu-04"]
        await pilot.press("enter")
        assert app.query_one(DataTable).has_focus and app.screen.filter == "gpu-04"
        await pilot.press("escape")
        assert len(app.query_one(DataTable).rows) == 10 and app.screen.filter == ""


async def test_enter_opens_the_nodes_grid_read_only_and_escape_returns():
    app = app_for(mixed_fleet())
    async with app.run_test(size=SIZE) as pilot:
        await first_read(pilot)
        await pilot.press("down")  # big-64, gpu-01: the second row
        await pilot.press("g")
        assert isinstance(app.screen, NodeScreen) and app.screen.node_name == "gpu-01"
        grid = app.screen.query_one(CardGrid)
        await pilot.pause(0.1)
        assert [t.card.state for t in grid.tiles] == ["job"] * 4 + ["free", "external", "reservation", "free"]
        actions = {
            active.binding.action.split("(")[0].split(".")[-1]
            for active in app.active_bindings.values()
            if app.check_action(active.binding.action.split(".")[-1], ()) is not False
        }
        # Moving, reading and leaving: no launch, stop or any other action on a node of the fleet.
        assert actions <= {
            "move",
            "close",
            "focus_detail",
            "quit",
            "command_palette",
            "focus_next",
            "focus_previous",
            "copy_text",
        }, actions
        assert "move" in actions
        await pilot.press("escape")
        assert not isinstance(app.screen, NodeScreen)


async def test_a_node_that_stops_publishing_is_shown_unreachable_and_its_free_cards_go():
    alive = {"gpu-01": up("gpu-01", node_snapshot(), published_at=T)}
    gone = {"gpu-01": (alive["gpu-01"][0], None)}  # its key expired, three periods on
    later = T + 3 * 10 + 1
    app = FleetApp(
        FixedFleet(fleet_of(alive, now=T + 1), fleet_of(gone, now=later, remembered={"gpu-01": T})),
        interval=60,
        clock=lambda: later,
    )
    async with app.run_test(size=SIZE) as pilot:
        await first_read(pilot)
        assert cell(app, "gpu-01", "free") == "8/8"
        await reads(2)(pilot)
        assert cell(app, "gpu-01", "free") == "?/8"
        assert cell(app, "gpu-01", "seen") == "unreachable since 12:00:00"
        assert "0/8 cards free" in app.query_one("#fleet-summary").content.plain


async def test_when_redis_cannot_be_read_every_card_is_unknown():
    app = app_for(
        mixed_fleet(),
        FleetUnavailable("cannot read the fleet from Redis at redis://fleet.example:6379/0 (Connection refused)"),
    )
    async with app.run_test(size=SIZE) as pilot:
        await reads(2)(pilot)
        assert cell(app, "gpu-01", "free") == "?/8" and cell(app, "gpu-01", "seen") == "unknown now"
        assert "Stale since" in app.query_one("#fleet-summary").content.plain
        assert "no card counts as free" in app.query_one("#fleet-summary").content.plain


async def test_a_read_that_fails_unexpectedly_goes_stale_and_the_view_keeps_reading():
    """Not frozen on the last picture, with its free cards, for good."""
    app = app_for(mixed_fleet(), RecursionError("maximum recursion depth exceeded"), mixed_fleet())
    async with app.run_test(size=SIZE) as pilot:
        await reads(2)(pilot)
        assert cell(app, "gpu-01", "free") == "?/8" and cell(app, "gpu-01", "seen") == "unknown now"
        assert "maximum recursion depth exceeded" in app.query_one("#fleet-summary").content.plain
        await reads(3)(pilot)
        assert cell(app, "gpu-01", "seen") != "unknown now", "read again, and shown again"


async def test_what_the_view_keeps_of_each_node_goes_with_the_node():
    """Names come and go (anyone can write to Redis): nothing is kept for one that is gone."""
    churn = [fleet_of({f"sim-{i}": up(f"sim-{i}", node_snapshot())}) for i in range(5)]
    app = app_for(*churn)
    async with app.run_test(size=SIZE) as pilot:
        await reads(5)(pilot)
        assert set(app.follower.snapshots) == {"sim-4"} and set(app.screen._cells) == {"sim-4"}


async def test_other_peoples_text_from_redis_is_escaped():
    nasty = "gpu-\x1b[2J\u202e9"
    snap = node_snapshot(host="\x1b]0;owned\x07", jobs=(job("j\x1b[31m", (0,), owner="eve\u202e"),))
    app = app_for(fleet_of({"n": (registration_bytes(nasty), publication_bytes(nasty, "n", snap))}))
    async with app.run_test(size=SIZE) as pilot:
        await first_read(pilot)
        shown = cell(app, nasty, "name")
        assert "\x1b" not in shown and "\\x1b[2J\\u202e9" in shown
        await pilot.press("g")
        await pilot.pause(0.1)
        tile = app.screen.query_one(CardGrid).tiles[0]
        assert "\x1b" not in tile.card.run_id and "\\x1b[31m" in tile.card.run_id


async def test_a_node_with_nothing_to_open_is_said_in_plain_text_whatever_its_name():
    """In markup, "[/x]" would fail to render and "[@click=app.quit]" would be a button."""
    nasty = "gpu-[@click=app.quit]x[/][/nope]\x1b[2J"
    app = app_for(fleet_of({"n": (registration_bytes(nasty), None)}))
    async with app.run_test(size=SIZE) as pilot:
        await first_read(pilot)
        await pilot.press("g")
        await pilot.pause(0.2)
        [note] = app._notifications
        assert note.message.startswith("gpu-[@click=app.quit]x[/][/nope]\\x1b[2J: no card grid to show")
        assert note.markup is False and app.is_running


# ── as pictures ───────────────────────────────────────────────────────────────


def hundred_nodes() -> record.FleetPicture:
    nodes = {}
    for n in range(100):
        name = f"gpu-{n:03d}"
        if n % 17 == 5:
            nodes[name] = (registration_bytes(name, started_at=T - 600), None)
            continue
        held = tuple(range(n % 9)) if n % 9 else ()
        nodes[name] = up(
            name, node_snapshot(jobs=(job(f"run-{n}", held),) if held else (), external=(7,) if n % 11 == 0 else ())
        )
    return fleet_of(nodes)


class TestPictures:
    def test_a_mixed_fleet(self, snap_compare):
        assert snap_compare(app_for(mixed_fleet()), terminal_size=SIZE, run_before=first_read)

    def test_a_mixed_fleet_at_80x24(self, snap_compare):
        """Each card's state by its mark as well as its colour, and every column whole."""
        assert snap_compare(app_for(mixed_fleet()), terminal_size=(80, 24), run_before=first_read)

    def test_a_hundred_nodes(self, snap_compare):
        assert snap_compare(app_for(hundred_nodes()), terminal_size=SIZE, run_before=first_read)

    def test_a_node_opened_read_only(self, snap_compare):
        async def open_gpu_02(pilot) -> None:
            await first_read(pilot)
            await pilot.press("down", "down", "g")
            await pilot.pause(0.1)

        assert snap_compare(app_for(mixed_fleet()), terminal_size=SIZE, run_before=open_gpu_02)

    def test_a_node_opened_at_80x24_shows_every_card(self, snap_compare):
        async def open_gpu_02(pilot) -> None:
            await first_read(pilot)
            await pilot.press("down", "down", "g")
            await pilot.pause(0.1)

        assert snap_compare(app_for(mixed_fleet()), terminal_size=(80, 24), run_before=open_gpu_02)

    def test_an_unreachable_node_opened(self, snap_compare):
        alive = {"gpu-01": up("gpu-01", node_snapshot(jobs=(job("train", (0, 1)),)), published_at=T)}
        later = T + 60

        async def open_after_it_went(pilot) -> None:
            await first_read(pilot)
            await pilot.press("g")
            await reads(2)(pilot)

        gone = {name: (reg, None) for name, (reg, _) in alive.items()}  # the keys expired
        app = FleetApp(
            FixedFleet(fleet_of(alive, now=T + 1), fleet_of(gone, now=later, remembered={name: T for name in alive})),
            interval=60,
            clock=lambda: later,
        )
        assert snap_compare(app, terminal_size=SIZE, run_before=open_after_it_went)

    def test_filtering(self, snap_compare):
        assert snap_compare(
            app_for(mixed_fleet()), terminal_size=SIZE, run_before=first_read, press=["slash", "g", "p", "u", "-", "0"]
        )


async def test_enter_opens_the_node_s_own_dashboard_over_ssh_at_its_published_address():
    regs = {"i1": registration_bytes("gpu-01", ssh="ops@gpu-01.example.org:2222")}
    opened = []

    def dashboard(target):
        opened.append(target)
        return 1

    app = FleetApp(FixedFleet(fleet_of({"gpu-01": (regs["i1"], None)})), clock=lambda: NOW, open_dashboard=dashboard)
    async with app.run_test(size=SIZE) as pilot:
        await first_read(pilot)
        await pilot.press("enter")
        await pilot.pause(0.2)
    assert [str(t) for t in opened] == ["ops@gpu-01.example.org:2222"]
    [note] = app._notifications
    assert note.message == (
        "gpu-01 (ops@gpu-01.example.org:2222): its dashboard ended with exit code 1, "
        "for the reason it gave on the terminal."
    )


async def test_a_node_with_no_address_is_not_handed_to_ssh():
    opened = []
    app = FleetApp(
        FixedFleet(fleet_of({"gpu-01": (registration_bytes("gpu-01", ssh="-oProxyCommand=x"), None)})),
        clock=lambda: NOW,
        open_dashboard=lambda target: opened.append(target) or 0,
    )
    async with app.run_test(size=SIZE) as pilot:
        await first_read(pilot)
        await pilot.press("enter")
        await pilot.pause(0.2)
    assert opened == []
    [note] = app._notifications
    assert "published no SSH address" in note.message and "g shows its cards" in note.message
