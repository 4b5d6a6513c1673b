"""A MIG card on the dashboard: its slices under it, and a slice launched from the form.

A node served in the test's process, whose card 1 is an H200 split in five
(the capture's layout: two compute instances of a 3g.71gb GPU instance, a
2g.35gb and two 1g.18gb), with the real process runtime.
"""

from __future__ import annotations

import pytest

from helpers.dashboard import SIZE, fill
from helpers.waiting import until_pilot as until
from tpnode_tui.tui.screens.dialogs.launch import LaunchScreen

GIB = 1024


def mig_card() -> dict:
    def piece(n: int, profile: str, gi: int, ci: int, total: int) -> dict:
        return {
            "profile": profile,
            "uuid": f"MIG-test0001-{n:04d}-5e8f-9a0b-{gi:06d}{ci:06d}",
            "gpu_instance_id": gi,
            "compute_instance_id": ci,
            "memory_total_mib": total,
            "memory_used_mib": 13,
            "processes": [],
        }

    return {
        "name": "NVIDIA H200",
        "memory_total_mib": 143771,
        "memory_used_mib": 300,
        "mig": True,
        "utilization_pct": None,
        "processes": [],
        "slices": [
            piece(0, "1c.3g.71gb", 2, 0, 71424),
            piece(1, "2c.3g.71gb", 2, 1, 71424),
            piece(2, "2g.35gb", 3, 0, 33280),
            piece(3, "1g.18gb", 9, 0, 16384),
            piece(4, "1g.18gb", 10, 0, 16384),
        ],
    }


#: four H200s, card 1 in MIG mode, as the dashboard serves them without an agent
pytestmark = pytest.mark.service_node(dashboard=True, scene_cards={1: mig_card()})


def tile(app, index: int) -> str:
    return app.query_one(f"#card-{index}").render().plain


async def test_a_mig_card_shows_its_slices_on_its_tile_and_in_the_detail_pane(service_node):
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await until(
            pilot, lambda: app.follower.snapshot and app.follower.snapshot.cards[1].state == "mig", "the MIG card"
        )
        await until(pilot, lambda: " MIG " in tile(app, 1), "its tile laid out and drawn")
        text = tile(app, 1)
        assert " MIG " in text and "5 of 5 MIG slices free" in text, text
        assert "○1c.3g ○2c.3g ○2g ○1g ○1g" in text, text  # each slice after its state's mark: free
        assert "util" not in text  # the driver reports no utilisation in MIG mode: the slices take its line
        app.main.query_one("CardGrid").select(1)
        await until(pilot, lambda: "1:3" in str(app.query_one("#detail-text").render()), "the slices listed")
        detail = str(app.query_one("#detail-text").render())
        assert "split into MIG slices" in detail
        for name, profile in (("1:0", "1c.3g.71gb"), ("1:2", "2g.35gb"), ("1:4", "1g.18gb")):
            line = next(ln for ln in detail.splitlines() if ln.strip().startswith(name))
            assert "FREE" in line and profile in line, line
        assert "MIG-test0001-0003-5e8f-9a0b-000009000000" in detail


async def test_a_slice_launched_from_the_form_is_named_where_it_runs(service_node):
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await until(
            pilot, lambda: app.follower.snapshot and app.follower.snapshot.cards[1].state == "mig", "the MIG card"
        )
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, LaunchScreen), "the launch form")
        hint = app.screen.query_one("#slice").placeholder
        assert hint == "instead of cards: 1c.3g.71gb, 1g.18gb x2, 2c.3g.71gb, 2g.35gb", hint
        await fill(pilot, app.screen, "cards", "2")
        await fill(pilot, app.screen, "slice", "1g.18gb")
        await fill(pilot, app.screen, "run-id", "nb")
        await pilot.press("enter")
        assert isinstance(app.screen, LaunchScreen), "a slice with 2 cards was not refused"
        assert "leave cards at 1" in str(app.screen.query_one("#cards-error").render())
        await fill(pilot, app.screen, "cards", "1")
        await pilot.press("enter")
        await until(pilot, lambda: app.heard("Launched: nb got slice 1g.18gb of card 1."), "the slice launched")
        await until(
            pilot, lambda: any(s.state == "job" for s in app.follower.snapshot.cards[1].slices), "the slice held"
        )
        held = next(s for s in app.follower.snapshot.cards[1].slices if s.state == "job")
        assert (held.index, held.run_id) == (3, "nb")  # the first 1g.18gb of the card
        table = app.query_one("#jobs")
        row = [str(cell) for cell in table.get_row("job:nb")]
        assert "1:1g.18gb" in row, row
        assert "4 of 5 MIG slices free" in tile(app, 1)
        app.main.query_one("CardGrid").select(1)
        await until(pilot, lambda: "1:3" in str(app.query_one("#detail-text").render()), "the slices listed")
        detail = str(app.query_one("#detail-text").render()).splitlines()
        assert [ln for ln in detail if ln.strip().startswith("1:3") and "JOB" in ln and "nb" in ln], detail
