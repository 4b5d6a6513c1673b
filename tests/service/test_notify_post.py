"""The agent's post on its own: real senders (children, as the account) to a real JSON webhook.

What one account can make grow is bounded: a lane of TUNEPLANE_NOTIFY_QUEUE
notices that drops the oldest and says how many with the next one sent, and
limits per event and per account an hour, whose overflow is said the same
way. The account here is root's (the sender then stays root), and no
terminal is written: a test must not write to the terminals of whoever runs it.
"""

from __future__ import annotations

import os

import pytest

from helpers.clocks import MovedClock
from helpers.receivers import Receiver
from helpers.waiting import until_async
from tpnode_tui.model.jobs import RunAs
from tpnode_tui.notify.post import Notice, Post, Recipient
from tpnode_tui.state.addresses import Address

ROOT = RunAs(uid=os.getuid(), gid=os.getgid(), groups=(), user="root", home="/")


def to(receiver: Receiver) -> Recipient:
    url = receiver.url("root")
    return Recipient(ROOT, (Address(url, url),), terminals=False)


async def got(receiver: Receiver, count: int) -> list[dict]:
    return await until_async(
        lambda: receiver.to("root") if len(receiver.to("root")) >= count else None,
        f"{count} notices",
        show=lambda: [n["title"] for n in receiver.to("root")],
    )


async def test_a_full_lane_drops_its_oldest_and_the_next_notice_sent_says_how_many(receiver):
    post = Post(queue=2, urls=5, event_per_hour=100, account_per_hour=100, timeout_s=60)
    try:
        receiver.held.clear()  # the first is taken and not answered: the others wait in the lane
        assert post.send(to(receiver), Notice("ended", "n1", "first"))
        await got(receiver, 1)
        for n in (2, 3, 4):
            assert post.send(to(receiver), Notice("ended", f"n{n}", f"number {n}"))
        receiver.held.set()
        notices = await got(receiver, 3)
        assert [n["title"] for n in notices] == ["n1", "n3", "n4"]
        assert notices[1]["message"] == "number 3"
        assert notices[2]["message"] == "number 4 (1 older notice was dropped: more came than could be sent)"
    finally:
        await post.close()


async def test_past_its_limits_an_account_is_not_sent_more_and_the_next_notice_says_how_many(receiver):
    clock = MovedClock()
    post = Post(queue=10, urls=5, event_per_hour=2, account_per_hour=3, timeout_s=60, clock=clock)
    try:
        filed = [post.send(to(receiver), Notice("ended", f"a{n}", "of a kind")) for n in (1, 2, 3)]
        filed += [post.send(to(receiver), Notice("placed", f"b{n}", "another")) for n in (1, 2)]
        assert filed == [True, True, False, True, False]
        clock.advance(3600)
        assert post.send(to(receiver), Notice("ended", "c1", "an hour later"))
        notices = await got(receiver, 4)
        assert [n["title"] for n in notices] == ["a1", "a2", "b1", "c1"]
        over = "(1 notice was not sent: over the limit of 2 of a kind, 3 in all, an hour)"
        assert [n["message"] for n in notices] == ["of a kind", "of a kind", f"another {over}", f"an hour later {over}"]
    finally:
        await post.close()


async def test_a_url_apprise_cannot_send_to_is_refused_without_quoting_it():
    from tpnode_tui.model.errors import BadRequest

    post = Post(queue=1, urls=5, event_per_hour=1, account_per_hour=1, timeout_s=60)
    try:
        with pytest.raises(BadRequest) as refused:
            await post.check(ROOT, "nosuch://token-abc123/x")
        assert "nosuch://" in str(refused.value) and "token-abc123" not in str(refused.value)
        shown = await post.check(ROOT, "json://user:token-abc123@127.0.0.1:9/x")
        assert shown.startswith("json://user:****@127.0.0.1:9/x") and "token-abc123" not in shown
    finally:
        await post.close()


async def test_no_more_urls_are_known_failing_for_an_account_than_it_may_keep():
    """A URL removed while a notice is on its way to it is noted failing all the same,
    after its removal forgot it: the account's oldest such go, so nothing grows."""
    post = Post(queue=10, urls=2, event_per_hour=100, account_per_hour=100, timeout_s=60)
    nobody = [f"json://127.0.0.1:9/gone-{n}" for n in range(4)]  # the discard port: nothing answers
    try:
        for n, url in enumerate(nobody):
            post.send(Recipient(ROOT, (Address(url, url),), terminals=False), Notice("ended", f"n{n}", "lost"))
            await until_async(lambda: url in post.failing(ROOT.uid), f"{url} to be said to fail")  # noqa: B023
        assert sorted(post.failing(ROOT.uid)) == nobody[2:]
    finally:
        await post.close()
