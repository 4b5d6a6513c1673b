"""The web page in a real browser: Debian's chromium, driven by Selenium (tests/helpers/browser.py).

The page's server is ``tpnode-tui web`` run as a real account (it refuses
root) over a real root agent on a simulated 8-card node (helpers/agents.py),
or over a real redis-server that real agents publish to (helpers/fleet.py);
launches are made with the CLI as other real accounts. Every wait is a bound
on something that must happen, never a measure of speed; the one bound the
page promises (a change shown within 2 s, without a reload) is that bound.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys

import pytest

from helpers.accounts import Account
from helpers.browser import PHONE, as_phone, chromium
from helpers.fleet import AgentProcess
from helpers.load import kill_process_jobs
from helpers.paths import CHECKOUT
from helpers.services import write_scene
from helpers.waiting import until
from helpers.web import WebPage
from tpnode_tui.text.render import format_duration

#: how long the page may take to show what its server was told (bounds, not speeds)
SHOWN_S = 30.0

#: each card's tile: its index, its badge and who holds it, as the page shows them
TILES = (
    "return [...document.querySelectorAll('.tile')].map(t => [t.dataset.index,"
    " t.querySelector('.badge').textContent, t.querySelector('.who') ? t.querySelector('.who').textContent : ''])"
)
BANNERS = "return [...document.querySelectorAll('.banner')].map(b => b.textContent)"
#: each node of the fleet page: its status, its badge, when it was seen, and its cards' marks
NODES = (
    "return Object.fromEntries([...document.querySelectorAll('.node')].map(n => [n.dataset.name,"
    " [n.dataset.status, n.querySelector('.badge').textContent, n.querySelector('.seen').textContent,"
    " [...n.querySelectorAll('.cell')].map(c => c.textContent).join('')]]))"
)
WIDER_THAN_THE_SCREEN = "return document.documentElement.scrollWidth > document.documentElement.clientWidth"
POST = (
    "const done = arguments[arguments.length - 1];"
    "fetch(arguments[0], {method: 'POST', body: 'x'}).then(r => done(r.status), e => done(String(e)))"
)


@pytest.fixture
def browser():
    with chromium() as driver:
        yield driver


@pytest.fixture
def page_of(shared_node, accounts):
    """``tpnode-tui web`` over the shared node's agent, as an account (alice unless named)."""
    started: list[WebPage] = []

    def start(who: Account | None = None, **env: str) -> WebPage:
        who = who or accounts.alice
        web = WebPage(who, shared_node.env(who) | env).start()
        started.append(web)
        return web

    yield start
    for web in started:
        web.close()


def tiles(browser) -> dict[int, tuple[str, str]]:
    return {int(index): (badge, who) for index, badge, who in browser.execute_script(TILES)}


def every_card_shown(browser, count: int = 8) -> dict[int, tuple[str, str]]:
    return until(lambda: (t := tiles(browser)) and len(t) == count and t, f"{count} cards on the page", SHOWN_S)


def launch(node, who: Account, run_id: str, *command: str) -> int:
    """A job launched with the CLI as ``who``; the card it got."""
    done = node.cli(who, "launch", "--cards", "1", "--run-id", run_id, "--json", "--", *command)
    assert done.returncode == 0, done.stderr
    [card] = json.loads(done.stdout)["gpus"]
    return card


def test_the_page_shows_the_eight_cards_of_a_simulated_node_in_the_dashboards_words(page_of, browser):
    web = page_of()
    browser.get(web.url)
    assert every_card_shown(browser) == {i: ("○ FREE", "nothing holds it") for i in range(8)}
    assert browser.find_element("id", "free").text == "8/8 free"
    assert browser.title.endswith("tpnode-tui")


def test_a_launch_made_with_the_cli_turns_a_card_from_free_to_job_on_the_open_page_without_a_reload(
    shared_node, accounts, page_of, browser
):
    web = page_of()
    browser.get(web.url)
    every_card_shown(browser)
    browser.execute_script("window.notReloaded = true")
    card = launch(shared_node, accounts.bob, "web-train", "sleep", "300")
    # within 2 s of the launch's answer: the bound the page promises
    until(
        lambda: tiles(browser)[card] == ("● JOB", f"web-train ({accounts.bob.name})"),
        "the card shown as the job's",
        2.0,
        show=lambda: tiles(browser)[card],
    )
    assert browser.execute_script("return window.notReloaded") is True
    assert browser.find_element("id", "free").text == "7/8 free"


def test_the_agent_stopped_shows_the_banner_and_the_page_recovers_when_it_is_back(shared_node, page_of, browser):
    web = page_of()
    browser.get(web.url)
    every_card_shown(browser)
    shared_node.kill()
    [banner] = until(lambda: browser.execute_script(BANNERS), "the agent-gone banner", SHOWN_S)
    assert banner.startswith("⚠ agent not answering since ") and "it reconnects by itself" in banner
    assert {badge for badge, _ in tiles(browser).values()} == {"? UNKNOWN"}, "a card still shown as known"
    assert browser.find_element("id", "free").text == "?/8 free"
    shared_node.start()
    until(lambda: not browser.execute_script(BANNERS), "the banner gone once the agent is back", SHOWN_S)
    assert every_card_shown(browser) == {i: ("○ FREE", "nothing holds it") for i in range(8)}


def test_the_page_reconnects_by_itself_after_its_server_restarts_saying_reconnecting_meanwhile(page_of, browser):
    web = page_of()
    browser.get(web.url)
    every_card_shown(browser)
    web.stop()
    connection = browser.find_element("id", "connection")
    said = until(lambda: connection.is_displayed() and connection.text, "the page saying it reconnects", SHOWN_S)
    assert said.startswith("reconnecting…")
    web.start()
    until(lambda: not connection.is_displayed(), "the page reconnected", SHOWN_S)
    assert every_card_shown(browser)[0] == ("○ FREE", "nothing holds it")


def test_every_method_but_get_is_405_and_the_json_is_the_status_json(shared_node, accounts, page_of, browser):
    web = page_of()
    browser.get(web.url)
    every_card_shown(browser)
    for path in ("", "events", "api/state.json", "state.txt", "no-such-page"):
        assert browser.execute_async_script(POST, path) == 405, path
    for method in ("PUT", "DELETE", "PATCH", "OPTIONS"):
        status, body = web.get("api/state.json", method=method)
        assert (status, body) == (405, b"tpnode-tui web is read-only: it answers GET (and HEAD) only\n"), method
    # a HEAD of the stream is its headers, and ends: the same connection answers the next request
    connection = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
    try:
        connection.request("HEAD", "/events")
        head = connection.getresponse()
        assert (head.status, head.getheader("Content-Type"), head.read()) == (200, "text/event-stream", b"")
        connection.request("GET", "/state.txt")
        assert connection.getresponse().status == 200
    finally:
        connection.close()
    page, cli = web.state(), shared_node.status(accounts.alice)
    assert set(page) == set(cli) - {"state_dir_note"}
    assert [c["state"] for c in page["cards"]] == [c["state"] for c in cli["cards"]]
    assert page["you"]["user"] == accounts.alice.name and page["via"] == "agent"
    status, text = web.get("state.txt")
    assert status == 200 and "8 cards total, 8 free" in text.decode()


def put_on_card(node, card: int, pid: int, mib: int = 4096) -> None:
    """``pid`` on ``card`` as the simulated driver lists it."""
    scene = json.loads(node.scene.read_text())
    scene["cards"][card].setdefault("processes", []).append({"pid": pid, "used_memory_mib": mib})
    scene["cards"][card]["memory_used_mib"] = mib
    node.scene.write_text(json.dumps(scene))


def test_another_accounts_command_line_is_hidden_unless_the_setting_shows_it(shared_node, accounts, page_of, browser):
    alice, bob = accounts.alice, accounts.bob
    mine = launch(shared_node, alice, "alice-job", "sh", "-c", "sleep 300", "alice-own-words")
    launch(shared_node, bob, "bob-job", "sh", "-c", "sleep 300", "bob-job-secret")
    squatters = [
        bob.spawn(["sh", "-c", "sleep 300", "bob-intruder-secret"], env=bob.env()),
        bob.spawn(["sh", "-c", "sleep 300", "bob-outside-secret"], env=bob.env()),
    ]
    try:
        put_on_card(shared_node, mine, squatters[0].pid)  # an intruder on alice's card
        put_on_card(shared_node, 7, squatters[1].pid)  # outside the platform, on a free card
        web = page_of(alice)
        browser.get(web.url)
        shown = until(
            lambda: (
                (t := tiles(browser)) and len(t) == 8 and t[7][0] == "▲ EXTERNAL" and "intruder" in t[mine][1] and t
            ),
            "the intruder and the process outside the platform",
            SHOWN_S,
        )
        assert shown[7][1] == f"pid {squatters[1].pid} {bob.name} (hidden)"
        text = browser.find_element("tag name", "body").text
        everything = text + json.dumps(web.state()) + web.get("state.txt")[1].decode()
        for secret in ("bob-job-secret", "bob-intruder-secret", "bob-outside-secret"):
            assert secret not in everything, secret
        assert "alice-own-words" in text  # the page's own account's command is shown
        assert f"{bob.name} (pid {squatters[0].pid}, (hidden), 4.0 GiB) is using card {mine}" in text
        everyone = page_of(alice, TUNEPLANE_WEB_SHOW_COMMANDS="on")
        browser.get(everyone.url)
        until(lambda: "bob-intruder-secret" in browser.find_element("tag name", "body").text, "bob's shown", SHOWN_S)
        assert "bob-outside-secret" in json.dumps(everyone.state())
    finally:
        for proc in squatters:
            proc.kill()
            proc.wait()


def test_the_page_fits_a_phones_width_without_scrolling_sideways(shared_node, accounts, page_of):
    long_id = "a-run-id-as-long-as-the-node-takes-them-" + "x" * 23
    launch(shared_node, accounts.bob, long_id, "python3", "-c", "import time; time.sleep(300)", "--" + "y" * 120)
    web = page_of()
    with chromium() as phone:
        as_phone(phone)
        phone.get(web.url)
        until(lambda: any(long_id in who for _, who in tiles(phone).values()), "the long run id shown", SHOWN_S)
        assert phone.execute_script("return document.documentElement.clientWidth") <= PHONE[0]
        assert not phone.execute_script(WIDER_THAN_THE_SCREEN), "the page scrolls sideways at a phone's width"


def test_a_blind_probe_a_reservation_and_the_usage_ledger_are_on_the_page(shared_node, accounts, page_of, browser):
    alice = accounts.alice
    done = shared_node.cli(alice, "reserve", "--cards", "1", "--for", "2h", "--run-id", "rsv-web")
    assert done.returncode == 0, done.stderr
    web = page_of(alice)
    browser.get(web.url)
    reserved = until(
        lambda: browser.find_elements("css selector", "table.reserved tbody tr"), "the reservation's row", SHOWN_S
    )
    assert reserved[0].text.startswith(f"rsv-web {alice.name} card 0 ")
    usage = until(lambda: browser.find_elements("css selector", "#usage h3"), "the usage table", SHOWN_S)
    assert [h.text for h in usage] == ["Last 24 hours", "Last 7 days"]
    said = browser.find_element("id", "usage").text
    assert "total" in said and "your own rows, and the whole node's total" in said  # as the agent answers alice
    write_scene(shared_node.scene, 8, blind=True)
    until(
        lambda: [b for b in browser.execute_script(BANNERS) if b.startswith("⚠ PROBE-BLIND: ")],
        "the probe-blind banner",
        SHOWN_S,
    )
    free = until(lambda: [t for t in tiles(browser).values() if t[0] == "◌ UNVERIFIED"], "unverified cards", SHOWN_S)
    assert len(free) == 7 and browser.find_element("id", "free").text == "7/8 free, unverified"


def test_the_page_counts_time_as_the_server_words_it(page_of, browser):
    web = page_of()
    browser.get(web.url)
    every_card_shown(browser)
    for seconds in (0, 1, 59, 60, 61, 3599, 3600, 3661, 86399, 86400, 90061, 10 * 86400 + 7):
        assert browser.execute_script("return window.tpnodeDuration(arguments[0])", seconds) == format_duration(seconds)


def test_a_token_is_asked_for_and_a_visit_with_it_keeps_it_out_of_the_address(page_of, browser):
    token = "0123456789abcdef-web-token"
    web = page_of(TUNEPLANE_WEB_TOKEN=token)
    for path in ("", "events", "api/state.json", "state.txt"):
        status, body = web.get(path)
        assert status == 401 and b"asks for its token" in body and token.encode() not in body, path
    assert web.get("api/state.json", headers={"Authorization": f"Bearer {token}"})[0] == 200
    assert web.get("api/state.json", headers={"Authorization": "Bearer not-the-token-at-all"})[0] == 401
    browser.get(web.url + f"?token={token}")
    every_card_shown(browser)
    assert browser.current_url == web.url


def test_the_page_refuses_to_run_as_root_in_one_line():
    if os.geteuid() != 0:
        pytest.skip("the refusal is root's")
    done = subprocess.run(
        [sys.executable, "-m", "tpnode_tui", "web", "--listen", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=CHECKOUT,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "tpnode-tui: the web page runs as an ordinary account, never as root: start it as one "
        "(it reads the node through its agent, as every account may)\n"
    )


@pytest.mark.redis
def test_the_fleet_page_marks_a_node_that_stopped_publishing_and_shows_the_others(tmp_path, redis_url, accounts):
    agents = [AgentProcess(tmp_path, name, redis_url, cards=4) for name in ("gpu-01", "gpu-02")]
    web = None
    try:
        for agent in agents:
            agent.start()
        alice = accounts.alice
        web = WebPage(alice, alice.env(TUNEPLANE_FLEET_URL=redis_url), "--fleet").start()
        with chromium() as browser:
            browser.get(web.url)
            up = until(
                lambda: (
                    (n := browser.execute_script(NODES)) and len(n) == 2 and all(v[0] == "up" for v in n.values()) and n
                ),
                "both nodes up",
                SHOWN_S,
            )
            assert up["gpu-01"][1] == "● UP" and up["gpu-01"][3] == "○○○○"
            agents[1].kill(signal.SIGKILL)  # it stops publishing; its key expires three periods later
            nodes = until(
                lambda: (n := browser.execute_script(NODES))["gpu-02"][0] == "unreachable" and n,
                "the silent node marked",
                SHOWN_S,
            )
            assert nodes["gpu-02"][1] == "✖ UNREACHABLE" and nodes["gpu-02"][2].startswith("unreachable since ")
            assert nodes["gpu-02"][3] == "????", "a silent node's cards are shown as known"
            assert nodes["gpu-01"][:2] == ["up", "● UP"], "the silent node held the others back"
            as_phone(browser)
            until(lambda: not browser.execute_script(WIDER_THAN_THE_SCREEN), "the fleet at a phone's width", SHOWN_S)
    finally:
        if web is not None:
            web.close()
        for agent in agents:
            agent.kill()
            kill_process_jobs(agent.state)
