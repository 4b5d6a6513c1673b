"""The web page's words and its one follow, without a server or a browser: other accounts'
commands hidden, what a reading changes on the page, and what each open page is sent."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

from helpers.fleet import T, job, node_snapshot
from tpnode_tui.model.jobs import QueuedLaunch
from tpnode_tui.model.views import INTRUDER, HolderInfo
from tpnode_tui.port.wire.snapshot import snapshot_to_json
from tpnode_tui.text.render import intruder_words
from tpnode_tui.text.status import status_lines
from tpnode_tui.web.hidden import HIDDEN, hide_others
from tpnode_tui.web.hub import Hub
from tpnode_tui.web.page import NodeShown, node_page

ALICE, BOB = 1001, 1002


def shared_snapshot():
    """Card 0: alice's job, with bob intruding; card 3: a process of bob's outside the platform;
    card 4: alice's own process outside it; a queued launch of bob's."""
    snap = node_snapshot(8, jobs=(replace(job("train", (0,)), uid=ALICE, command=("python", "alice-train.py")),))
    bob = HolderInfo(pid=77, visible=True, user="bob", uid=BOB, command="python bob-secret.py --key s3cr3t")
    intruder = replace(bob, belongs=INTRUDER, used_memory_mib=1024)
    own = HolderInfo(pid=78, visible=True, user="alice", uid=ALICE, command="python alice-notebook.py")
    cards = list(snap.cards)
    cards[0] = replace(cards[0], holders=(intruder,), warning=intruder_words(intruder, 0, snap.jobs[0], "train", now=T))
    cards[3] = replace(cards[3], state="external", holders=(bob,))
    cards[4] = replace(cards[4], state="external", holders=(own,))
    queued = QueuedLaunch(
        run_id="later", owner="bob", cards=1, command=("python", "bob-queued.py"), queued_at=T, uid=BOB
    )
    return replace(snap, cards=tuple(cards), queue=(queued,))


def everything_said(snap) -> str:
    page = node_page(NodeShown(snap, served="agent"), T)
    return json.dumps(snapshot_to_json(snap)) + "\n".join(status_lines(snap, T)) + json.dumps(page)


def test_other_accounts_command_lines_are_hidden_everywhere_the_page_says_them_and_its_own_are_not():
    snap = shared_snapshot()
    assert "bob-secret.py" in everything_said(snap) and "bob-queued.py" in everything_said(snap)
    hidden = hide_others(snap, ALICE)
    said = everything_said(hidden)
    assert "bob-secret" not in said and "s3cr3t" not in said and "bob-queued" not in said
    assert "alice-train.py" in said and "alice-notebook.py" in said
    # what stays is what the dashboard shows everyone: who, which pid, how much
    assert hidden.cards[0].warning == f"bob (pid 77, {HIDDEN}, 1.0 GiB) is using card 0, held by train of alice"
    assert hidden.cards[3].holders[0].command == HIDDEN and hidden.cards[3].holders[0].user == "bob"
    assert hidden.queue[0].command == (HIDDEN,)


def test_a_command_whose_account_is_not_known_is_hidden_too():
    snap = shared_snapshot()
    unknown = replace(snap.jobs[0], uid=None)
    hidden = hide_others(replace(snap, jobs=(unknown,)), ALICE)
    assert hidden.jobs[0].command == (HIDDEN,)


def test_the_page_says_each_card_in_the_dashboards_words():
    snap = node_snapshot(
        8, jobs=(job("train", (0, 1)), job("rsv", (2,), kind="reservation")), external=(3,), unhealthy=(4,)
    )
    page = node_page(NodeShown(snap, served="agent at /run/x.sock"), T)
    cards = {c["index"]: c for c in page["cards"]}
    assert [cards[i]["badge"] for i in range(6)] == ["JOB", "JOB", "RESERVED", "EXTERNAL", "UNHEALTHY", "FREE"]
    assert [cards[i]["symbol"] for i in (0, 2, 5)] == ["●", "◆", "○"]
    assert cards[0]["who"] == "train (alice)" and cards[0]["runs"] == "python train.py"
    assert {"before": "up ", "since": T - 3600, "after": "", "kind": ""} in cards[0]["notes"]
    [ends] = [n for n in cards[2]["notes"] if "until" in n]
    assert (ends["before"], ends["until"], ends["past"]) == ("ends in ", T + 3600, "expired, ending")
    assert {"text": "never handed out", "kind": "error"} in cards[4]["notes"]
    assert cards[5]["who"] == "nothing holds it" and cards[5]["memory"] == "0 MiB/140.4 GiB"
    assert page["header"]["free"] == "3/8 free" and page["banners"] == []


def test_status_and_the_page_say_until_when_a_drained_card_stays_out_as_this_node_lifts_it():
    """The words the detail pane says (text/cards.py drain_until), in status' lines and on the page."""
    from tpnode_tui.model.views import Drain

    snap = node_snapshot(8)
    cards = list(snap.cards)
    xid = Drain(1, "XID 48: double-bit ECC error", "xid", T - 60, "xid", 48, boot="boot-a")
    lost = Drain(2, "XID 79: GPU has fallen off the bus", "xid", T - 60, "xid", 79, boot="boot-a", reboot=True)
    cards[1] = replace(cards[1], state="drained", reason=xid.reason, drain=xid)
    cards[2] = replace(cards[2], state="drained", reason=lost.reason, drain=lost)
    snap = replace(snap, cards=tuple(cards), return_after_check=False, boot="boot-a")
    lines = status_lines(snap, T)
    at = lines.index(next(line for line in lines if line.startswith("1    drained")))
    assert lines[at + 1] == (
        "  drained by XID 48: it stays out of service until an operator undrains it: a check that passes "
        "does not return it, as TUNEPLANE_RETURN_AFTER_CHECK is off"
    )
    assert (
        "  drained by XID 79: it stays out of service until the node has rebooted and a check has passed since, "
        "and an operator undrains it; undrain refuses before then unless --force"
    ) in lines
    page = {
        c["index"]: c for c in node_page(NodeShown(replace(snap, return_after_check=True), served="agent"), T)["cards"]
    }
    assert {
        "text": "it stays out of service until a check passes, or an operator undrains it",
        "kind": "quiet",
    } in page[1]["notes"]
    assert any("which returns it; undrain refuses before then" in n.get("text", "") for n in page[2]["notes"])


def test_while_the_agent_is_gone_every_card_is_marked_unknown_and_a_banner_says_why():
    snap = node_snapshot(8, jobs=(job("train", (0,)),))
    shown = NodeShown(snap, stale_since=T, stale_error="no agent answers", agent_gone=True, served="agent")
    page = node_page(shown, T + 5)
    assert {(c["symbol"], c["badge"]) for c in page["cards"]} == {("?", "UNKNOWN")}
    assert page["cards"][0]["who"] == "was job: train (alice)"
    assert page["header"]["free"] == "?/8 free"
    [banner] = page["banners"]
    assert banner["kind"] == "gone" and banner["text"].startswith("agent not answering since ")


def test_a_blind_probe_gets_its_banner():
    page = node_page(NodeShown(node_snapshot(8, blind=True), served="agent"), T)
    assert [b["kind"] for b in page["banners"]] == ["blind"]
    assert page["banners"][0]["text"].startswith("PROBE-BLIND: blind.")


async def next_event(events) -> bytes:
    return await asyncio.wait_for(events.__anext__(), 1)


async def test_each_open_page_gets_the_page_then_only_its_time_while_its_words_stay_the_same():
    hub = Hub(clock=lambda: T)
    events = hub.stream()
    assert await next_event(events) == b"retry: 1000\n\n"
    hub.publish({"cards": ["FREE"]}, T)
    first = await next_event(events)
    assert first.startswith(b"event: page\ndata: ") and json.loads(first.split(b"data: ")[1])["page"] == {
        "cards": ["FREE"]
    }
    hub.publish({"cards": ["FREE"]}, T + 1)  # a new reading that changed nothing shown
    fresh = await next_event(events)
    assert fresh.startswith(b"event: fresh\n") and json.loads(fresh.split(b"data: ")[1])["taken_at"] == T + 1
    hub.publish({"cards": ["FREE"]}, T + 1)  # the same again: nothing to send
    hub.publish({"cards": ["JOB"]}, T + 2)
    changed = await next_event(events)
    assert json.loads(changed.split(b"data: ")[1])["page"] == {"cards": ["JOB"]}
    assert hub.streams == 1
    await events.aclose()
    assert hub.streams == 0


async def test_a_page_that_reads_slowly_is_sent_the_newest_page_never_a_backlog():
    hub = Hub(clock=lambda: T)
    events = hub.stream()
    await next_event(events)
    for n in range(100):
        hub.publish({"n": n}, T + n)
    latest = await next_event(events)
    assert json.loads(latest.split(b"data: ")[1])["page"] == {"n": 99}
    await events.aclose()
