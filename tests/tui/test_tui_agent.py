"""The dashboard on a shared node, through the node's agent.

The agent runs in the test's own event loop over a real Unix socket (so it
can be stopped and started again on the same socket while a dashboard
watches); the dashboard is the real app over the product's agent client. The
agent as its own process as root, and what another account's dashboard
shows, are in tests/system/test_tui_accounts.py.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from helpers.dashboard import SIZE, Dashboard, fill, header, polled, queued, states, tile_text
from helpers.waiting import until_async, until_pilot
from tpnode_tui.port.types.jobs import LaunchRequest
from tpnode_tui.port.types.reservations import ReserveRequest
from tpnode_tui.tui.screens.dialogs.confirm import ConfirmScreen
from tpnode_tui.tui.screens.dialogs.launch import LaunchScreen
from tpnode_tui.tui.screens.flows.launches import enqueue

WAIT_S = 15.0


async def test_through_the_agent_the_header_names_you_and_the_socket_and_a_launch_shows(agent, client):
    app = Dashboard(client, default_command=("sleep", "60"))
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        assert header(app).splitlines()[1].strip() == f"root · operator │ agent at {agent.socket}"
        await pilot.press("l")
        assert isinstance(app.screen, LaunchScreen)
        await fill(pilot, app.screen, "cards", "2")
        await fill(pilot, app.screen, "run-id", "via-agent")
        await pilot.press("enter")
        await until_pilot(pilot, lambda: app.heard("Launched: via-agent got cards 0,1."), "the launch")
        await until_pilot(pilot, lambda: states(app)[:2] == ["job", "job"], "the job on its cards")
        [job] = app.follower.snapshot.jobs
        assert job.owner == "root"  # the kernel's name for the asker
        assert "via-agent" in tile_text(app, 0)


async def test_when_the_agent_goes_away_nothing_is_free_nothing_is_done_and_it_reconnects(agent, client):
    await client.launch(LaunchRequest(cards=1, command=("sleep", "60"), run_id="survivor"))
    app = Dashboard(client, default_command=("sleep", "60"))
    async with app.run_test(size=SIZE) as pilot:
        await until_pilot(pilot, lambda: app.follower.snapshot and states(app)[0] == "job", "the running job")
        assert "FREE" in tile_text(app, 1)

        agent.stop.set()
        await asyncio.wait_for(agent.task, WAIT_S)
        banner = app.query_one("#stale-banner")
        await until_pilot(pilot, lambda: banner.has_class("-shown"), "the banner")
        text = str(banner.render())
        assert text.startswith("agent not answering since ") and f"no agent answers at {agent.socket}" in text
        assert "it reconnects by itself" in text
        assert "NO AGENT since" in header(app) and "(not answering; reconnecting)" in header(app)
        assert not any("FREE" in tile_text(app, i) for i in range(8)), "a card shown free with no agent"
        assert app.main.check_action("stop", ()) is False
        await pilot.press("l")
        assert not isinstance(app.screen, LaunchScreen), "a form opened for a node that cannot answer"
        assert app.heard("the node's agent is not answering since")
        assert app.heard("so launching cannot be asked for")
        await pilot.pause(1.5)  # it keeps trying meanwhile, and keeps saying so
        assert banner.has_class("-shown")

        agent.stop = asyncio.Event()
        await agent.start()  # the same socket, a new agent: the dashboard finds it by itself
        await until_pilot(pilot, lambda: not banner.has_class("-shown"), "the dashboard to reconnect")
        assert app.follower.stale_since is None and "reconnecting" not in header(app)
        assert "survivor" in tile_text(app, 0) and "FREE" in tile_text(app, 1)
        await pilot.press("l")
        await fill(pilot, app.screen, "run-id", "after-the-restart")
        await pilot.press("enter")
        await until_pilot(pilot, lambda: app.heard("Launched: after-the-restart got card 1."), "a launch once back")


async def test_with_the_log_open_the_agent_still_stops_at_once_and_the_log_follows_the_next_one(agent, client):
    """The events pane follows the agent's log as a stream: one the agent must
    cut when it stops, or it would wait on the dashboard before stopping."""
    await client.drain(3, "before the restart")
    app = Dashboard(client, default_command=("sleep", "60"))
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await pilot.press("e")
        await until_pilot(
            pilot, lambda: any("before the restart" in e["message"] for e in app.node_log.entries), "the log"
        )

        agent.stop.set()
        await asyncio.wait_for(agent.task, WAIT_S)  # not held up by the dashboard's stream
        await until_pilot(pilot, lambda: app.node_log.problem is not None, "the pane to say it is not following")

        agent.stop = asyncio.Event()
        await agent.start()
        await client.drain(5, "after the restart")
        await until_pilot(
            pilot,
            lambda: any("after the restart" in e["message"] for e in app.node_log.entries),
            "the log followed again, from the new agent",
        )
        assert app.node_log.problem is None
        assert [e["message"] for e in app.node_log.entries].count("card 3 drained by root: before the restart") == 1


async def test_through_the_agent_quitting_leaves_the_queue_to_the_agent_without_asking(agent, client):
    await client.reserve(ReserveRequest(cards=8, duration_s=600, run_id="everything"))
    app = Dashboard(client, default_command=("sleep", "60"))
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await enqueue(app.main, LaunchRequest(cards=1, command=("sleep", "60"), run_id="later"))
        await until_pilot(pilot, lambda: queued(app) == ["later"], "the launch in the agent's queue")
        assert app.heard("The node's agent keeps it, with or without this dashboard.")
        await pilot.press("q")
        assert not isinstance(app.screen, ConfirmScreen), "quitting asked, though the agent keeps the queue"
        assert app.return_code == 0
    assert [q.run_id for q in await client.queued()] == ["later"], "the queue went with the dashboard"
    await client.stop("everything")

    async def started() -> bool:
        return any(j.run_id == "later" and j.live for j in (await client.status()).snapshot.jobs)

    await until_async(started, "the queued launch to start after the dashboard quit", every=0.1)


def test_the_dashboard_told_to_use_an_agent_that_does_not_answer_says_so_in_one_line(tmp_path):
    terminal, other_end = os.openpty()  # the dashboard needs a terminal on standard input
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(TUNEPLANE_AGENT="on", TUNEPLANE_AGENT_SOCKET=str(tmp_path / "nobody.sock"))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tpnode_tui"], stdin=other_end, env=env, capture_output=True, text=True, timeout=60
        )
    finally:
        os.close(terminal)
        os.close(other_end)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"no agent answers at {tmp_path / 'nobody.sock'} (TUNEPLANE_AGENT=on)" in done.stderr
