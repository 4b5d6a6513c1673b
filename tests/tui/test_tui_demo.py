"""The demo as a newcomer meets it: every card state at once, and the demo keys."""

from __future__ import annotations

import time

import pytest

from helpers.waiting import until_pilot
from tpnode_tui.cli import main
from tpnode_tui.demo.scene import DemoScene
from tpnode_tui.demo.stage import DEMO_COMMAND, start_demo
from tpnode_tui.node.local import LocalNode
from tpnode_tui.tui.app import NodeDashboard
from tpnode_tui.tui.screens.dialogs.confirm import ConfirmScreen
from tpnode_tui.tui.widgets.tiles import CardGrid
from tpnode_tui.tui.wording.card import describe_card


@pytest.fixture
async def demo_app(tmp_path):
    demo = start_demo(tmp_path / "demo")
    node = LocalNode.from_settings(demo.settings(), interval=0.2)
    scene = DemoScene(demo, node)
    app = NodeDashboard(node, demo=scene, default_command=DEMO_COMMAND)
    yield app
    await scene.stop_jobs()
    await node.close()
    demo.close()


def opened(app: NodeDashboard) -> bool:
    return app.follower.snapshot is not None and {"demo-train-llama", "demo-notebook", "rsv-alice"} <= {
        j.run_id for j in app.follower.snapshot.jobs if j.live
    }


def card(app: NodeDashboard, index: int):
    return app.follower.snapshot.cards[index]


def queued(app: NodeDashboard) -> list[str]:
    return [q.run_id for q in app.follower.snapshot.queue]


async def test_the_demo_shows_every_state_and_who_holds_each_card(demo_app):
    app = demo_app
    async with app.run_test(size=(120, 40)) as pilot:
        await until_pilot(pilot, lambda: opened(app), "the demo's opening job and reservation")
        await until_pilot(pilot, lambda: card(app, 7).state == "drained", "the opening XID to drain card 7")
        states = [c.state for c in app.follower.snapshot.cards]
        assert {"job", "reservation", "external", "unhealthy", "drained", "free", "mig"} <= set(states), states
        assert app.follower.you is not None and app.follower.you.operator, "whoever runs the demo operates its node"

        await until_pilot(pilot, lambda: card(app, 0).holders, "the job's process on its cards")
        [worker] = card(app, 0).holders
        assert worker.belongs == "holder" and "tpnode_tui.demo train" in worker.command

        reserved = card(app, 2)
        assert reserved.state == "reservation" and reserved.run_id == "rsv-alice"
        [squatter] = reserved.holders
        assert squatter.pid == app.demo.squatter.pid and squatter.belongs == "intruder"
        assert reserved.intruders == (squatter.pid,) and app.follower.snapshot.intruder_cards == (2,)
        assert "is using card 2, reserved by alice" in reserved.warning
        assert "! " in app.query_one("#card-2").render().plain

        drained = card(app, 4)
        assert drained.state == "drained" and drained.drain.source == "operator" and drained.drain.by == "ops"
        assert "RMA 4411" in app.query_one("#card-4").render().plain
        xid = card(app, 7).drain
        assert xid.source == "xid" and xid.xid == 79
        assert xid.reason == "XID 79: GPU has fallen off the bus; reboot the node"

        unseen = card(app, 5)
        assert unseen.state == "external" and not unseen.holders[0].visible
        text = describe_card(unseen, time.time(), 512).plain
        assert "a process this machine cannot see" in text and "30.0 GiB in use" in text

        split = card(app, 1)
        assert split.state == "mig" and split.reason == "split into 5 MIG slices: see them"
        assert [(s.facts.profile, s.state) for s in split.slices] == [
            ("1c.3g.71gb", "external"),
            ("2c.3g.71gb", "shared"),
            ("2g.35gb", "free"),
            ("1g.18gb", "job"),
            ("1g.18gb", "free"),
        ]
        assert split.slices[3].run_id == "demo-notebook" and split.slices[3].job.owner == "bob"
        await until_pilot(pilot, lambda: card(app, 1).slices[3].holders, "the notebook's process on its slice")
        [notebook] = card(app, 1).slices[3].holders
        assert notebook.belongs == "holder" and "tpnode_tui.demo train" in notebook.command
        await until_pilot(
            pilot,
            lambda: "2 of 5 MIG slices free" in app.query_one("#card-1").render().plain,
            "the MIG card's tile to show its slices",
        )
        assert " MIG " in app.query_one("#card-1").render().plain

        assert card(app, 6).state == "unhealthy" and "row remapping" in card(app, 6).reason
        assert "row remapping" in app.query_one("#card-6").render().plain

        seen = {card(app, 0).facts.utilization_pct}
        await until_pilot(
            pilot,
            lambda: seen.add(card(app, 0).facts.utilization_pct) or len(seen) > 1,
            "the job's utilisation to move",
        )


async def test_the_demo_keys_toggle_probe_blind_an_outside_user_and_raise_an_xid(demo_app):
    app = demo_app
    async with app.run_test(size=(120, 40)) as pilot:
        await until_pilot(pilot, lambda: opened(app), "the demo to open")
        free = [c.index for c in app.follower.snapshot.cards if c.state == "free"]
        assert free

        await pilot.press("b")
        await until_pilot(pilot, lambda: app.query_one("#blind-banner").has_class("-shown"), "the blind banner")
        await until_pilot(pilot, lambda: card(app, free[0]).state == "unverified", "unverified cards")
        assert not [c for c in app.follower.snapshot.cards if c.state == "free"]
        await pilot.press("b")
        await until_pilot(pilot, lambda: card(app, free[0]).state == "free", "the probe to see again")

        app.query_one(CardGrid).select(free[0])
        await pilot.press("x")
        await until_pilot(pilot, lambda: card(app, free[0]).state == "external", "an outside user")
        assert card(app, free[0]).holders[0].pid == app.demo.squatter.pid
        await pilot.press("x")
        await until_pilot(pilot, lambda: card(app, free[0]).state == "free", "the outside user to leave")

        await pilot.press("X")
        await until_pilot(pilot, lambda: card(app, free[0]).state == "drained", "the XID to drain the card")
        drain = card(app, free[0]).drain
        assert drain.source == "xid" and drain.xid == 48 and "double bit ECC error" in drain.reason


async def test_an_empty_command_in_the_demo_runs_the_demo_workload(demo_app):
    app = demo_app
    async with app.run_test(size=(120, 40)) as pilot:
        await until_pilot(pilot, lambda: opened(app), "the demo to open")
        await pilot.press("l")
        app.screen.query_one("#run-id").value = "demo-default"
        await pilot.press("enter")
        await until_pilot(
            pilot, lambda: any(j.run_id == "demo-default" for j in app.follower.snapshot.jobs), "the launch"
        )
        [job] = [j for j in app.follower.snapshot.jobs if j.run_id == "demo-default"]
        assert job.command == DEMO_COMMAND and job.live


async def test_while_probe_blind_a_launch_can_be_queued_and_starts_once_the_probe_works(demo_app):
    app = demo_app
    async with app.run_test(size=(120, 40)) as pilot:
        await until_pilot(pilot, lambda: opened(app), "the demo to open")
        await pilot.press("b")
        await until_pilot(pilot, lambda: not app.follower.snapshot.occupancy.external_probe_ok, "probe-blind")
        assert "launches wait until the probe works again" in str(app.query_one("#blind-banner").render())

        await pilot.press("l")
        context = str(app.screen.query_one(".dialog-context").render())
        assert "no card can be checked free" in context and "a launch waits until the probe works" in context
        app.screen.query_one("#run-id").value = "after-the-probe"
        await pilot.press("enter")
        await until_pilot(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the queue offer")
        offer = str(app.screen.query_one(".dialog-body").render())
        assert "cannot be probed" in offer and "TUNEPLANE_ALLOW_UNVERIFIED=true" in offer, offer
        assert "starts by itself once the probe works again and 1 card can be checked free" in offer, offer
        await pilot.press("y")
        await until_pilot(pilot, lambda: queued(app) == ["after-the-probe"], "the launch in the node's queue")
        readings = app.follower.readings
        await until_pilot(pilot, lambda: app.follower.readings >= readings + 3, "three readings while blind")
        assert queued(app) == ["after-the-probe"], "a queued launch left the queue while the node was blind"
        assert all(j.run_id != "after-the-probe" for j in app.follower.snapshot.jobs), "started on unverified cards"

        await pilot.press("b")
        await until_pilot(
            pilot,
            lambda: any(j.run_id == "after-the-probe" and j.live for j in app.follower.snapshot.jobs),
            "the queued launch once the probe sees again",
        )
        [placed] = [c for c in app.follower.snapshot.cards if c.run_id == "after-the-probe"]
        assert placed.state == "job"


def test_a_bad_setting_at_start_is_one_line_and_exit_code_2(capsys, monkeypatch):
    monkeypatch.setenv("TUNEPLANE_PROBE", "nvml-please")
    assert main([]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "TUNEPLANE_PROBE" in err and "nvml-please" in err
