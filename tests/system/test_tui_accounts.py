"""The dashboard on a shared node as its accounts use it: the agent as its own process.

The agent runs as root, as systemd runs it (helpers/agents.py's SharedNode);
the dashboard is the real app over the product's agent client. What another
account sees is seen by a dashboard run as that account: a real process of a
real test account (tests/helpers/accounts.py), reporting what it showed. The
dashboard over an agent in the test's own loop is in tests/tui/test_tui_agent.py.
"""

from __future__ import annotations

import json
import textwrap

from helpers.accounts import runnable
from helpers.dashboard import SIZE, Dashboard, fill, header, polled, states
from helpers.waiting import until_pilot
from tpnode_tui.node.remote import AgentNode


async def test_the_dashboard_on_a_real_agent_launches_and_sees_its_job_with_its_exports(shared_node):
    node = AgentNode(shared_node.socket)
    app = Dashboard(node, default_command=("sleep", "60"))
    try:
        async with app.run_test(size=SIZE) as pilot:
            await polled(pilot, app)
            assert f"agent at {shared_node.socket}" in header(app)
            await pilot.press("l")
            await fill(pilot, app.screen, "cards", "2")
            await fill(pilot, app.screen, "run-id", "real-agent")
            await pilot.press("enter")
            await until_pilot(
                pilot, lambda: app.follower.snapshot and states(app)[:2] == ["job", "job"], "the job on its cards"
            )
            assert app.heard("Launched: real-agent got cards 0,1.")
            assert "export CUDA_VISIBLE_DEVICES=0,1" in str(app.query_one("#detail-text").render())
    finally:
        await node.close()


#: A dashboard run as another account against the agent; prints what it showed.
AS_ACCOUNT = textwrap.dedent("""
    import asyncio, json, sys, time
    from pathlib import Path
    from tpnode_tui.node.remote import AgentNode
    from tpnode_tui.tui.app import NodeDashboard

    class Dashboard(NodeDashboard):
        said = []
        def notify(self, message, **kwargs):
            self.said.append(f"{kwargs.get('title', '')}: {message}")
            super().notify(message, **kwargs)

    async def main():
        node = AgentNode(Path(sys.argv[1]))
        app = Dashboard(node)
        shown = {}
        async with app.run_test(size=(120, 40)) as pilot:
            deadline = time.monotonic() + 30
            while not (app.follower.snapshot and app.follower.snapshot.jobs):
                assert time.monotonic() < deadline, "nothing read"
                await pilot.pause(0.05)
            shown["header"] = str(app.query_one("#header").render())
            shown["stop offered"] = app.main.check_action("stop", ())
            shown["extend offered"] = app.main.check_action("extend", ())
            app.main.action_stop()  # as if offered anyway: the agent decides
            await pilot.press("y")
            while not any("allowed" in m for m in app.said):
                assert time.monotonic() < deadline, app.said
                await pilot.pause(0.05)
            shown["said"] = app.said
        await node.close()
        print(json.dumps(shown))

    asyncio.run(main())
""")


def test_another_account_s_dashboard_names_them_offers_no_stop_and_shows_the_agent_s_refusal(shared_node, accounts):
    alice, bob = accounts.alice, accounts.bob
    assert shared_node.cli(alice, "reserve", "--cards", "1", "--for", "1h", "--run-id", "a-rsv").returncode == 0
    script = shared_node.root / "dashboard_as.py"
    script.write_text(AS_ACCOUNT)
    script.chmod(0o644)
    done = bob.run([runnable().python, str(script), str(shared_node.socket)], env=shared_node.env(bob), timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    who = shown["header"].splitlines()[1].strip()
    assert who == f"{bob.name} │ agent at {shared_node.socket}", who  # not an operator: no "operator"
    assert shown["stop offered"] is False and shown["extend offered"] is False
    [refusal] = [m for m in shown["said"] if "allowed" in m]
    assert refusal.startswith("Not allowed to stop a-rsv: card 0 is held by a-rsv of ")
    operators = f"the operators here: root, group {accounts.operators_group}"
    assert f"only {alice.name} or an operator may stop it; {operators}" in refusal
    assert shared_node.status(alice)["jobs"][0]["status"] == "running"
