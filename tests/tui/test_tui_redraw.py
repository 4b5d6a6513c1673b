"""An idle dashboard repaints nothing, and still shows every change a poll brings.

Rebuilding the footer and repainting every tile on each poll, unchanged, was
most of what an idle dashboard cost (bench/run.py, docs/benchmarks.md). These
tests hold the saving and its other side: what a poll does change (a job that
appears on the selected card) still reaches the tile and the footer.
"""

from __future__ import annotations

import pytest
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from helpers.dashboard import SIZE, polled
from helpers.waiting import until_pilot
from tpnode_tui.model.jobs import JobSpec
from tpnode_tui.tui.app import NodeDashboard
from tpnode_tui.tui.widgets.tiles import CardTile

#: the node as the dashboard serves one without an agent (helpers/dashboard.py)
pytestmark = pytest.mark.service_node(dashboard=True)


async def polls(pilot, app: NodeDashboard, n: int) -> None:
    """n more readings, and what they drew."""
    await polled(pilot, app, n)
    await pilot.pause()


def footer_actions(app: NodeDashboard) -> set[str]:
    return {key.action for key in app.query(FooterKey)}


async def test_polls_that_change_nothing_rebuild_no_footer_and_repaint_no_tile(service_node, monkeypatch):
    rebuilt: list[object] = []
    painted: list[int] = []
    recompose, render = Footer.recompose, CardTile.render

    async def counting_recompose(self):
        rebuilt.append(self)
        return await recompose(self)

    def counting_render(self):
        painted.append(self.card.index)
        return render(self)

    monkeypatch.setattr(Footer, "recompose", counting_recompose)
    monkeypatch.setattr(CardTile, "render", counting_render)
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polls(pilot, app, 2)
        assert painted, "the tiles were drawn at least once"
        rebuilt.clear()
        painted.clear()
        await polls(pilot, app, 5)
        assert rebuilt == [], "an idle poll rebuilt the footer"
        assert painted == [], "an idle poll repainted tiles whose text had not changed"


async def test_a_job_that_appears_between_polls_reaches_the_tile_and_the_footer(service_node):
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polls(pilot, app, 2)
        assert "stop" not in footer_actions(app), "nothing to stop on a free card"
        assert "launch" in footer_actions(app)
        await service_node.allocator.launch(JobSpec(run_id="appears", cards=1, command=("sleep", "60"), owner="tester"))
        await until_pilot(pilot, lambda: "stop" in footer_actions(app), "the footer to offer Stop")
        tile = app.query_one("#card-0", CardTile)
        assert "appears" in tile.render().plain
        assert app.query_one("#card-0").has_class("state-job")
