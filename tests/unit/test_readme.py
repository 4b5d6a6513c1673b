"""The README is a newcomer's guide: it opens with the two set-up commands, stays
short, and every command it shows is one the CLI takes as written.

A command the README shows is checked with the CLI's own parser (nothing runs),
so a renamed flag or a subcommand that no longer exists fails here rather than in
the hands of someone following the tour. Links into docs/ and screenshots/ must
lead somewhere, and so must the links between the pages of docs/.
"""

from __future__ import annotations

import re
import shlex

import pytest

from helpers.paths import CHECKOUT
from tpnode_tui.cli import build_parser
from tpnode_tui.cli.registry import UsageError

README = CHECKOUT / "README.md"
SETUP = ("sh install.sh --demo", "bash tests/run.sh")
MAX_LINES = 300


def _text() -> str:
    return README.read_text()


def _fenced(text: str) -> list[str]:
    """Every fenced block's body, in order."""
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)


def _commands(text: str) -> list[str]:
    """The words after each ``tpnode-tui`` the README shows: on a line of a fenced
    block (up to a comment, a quote, a pipe or a redirection) and in inline code."""
    found = []
    for block in _fenced(text):
        for line in block.splitlines():
            line = re.sub(r"\s#\s.*$", "", line)
            if line.startswith(("$ ", "tpnode-tui:")):
                continue  # a transcript's output, not a command
            found += re.findall(r"(?:^|[\s'(])tpnode-tui((?:\s+[^\s|&;<>'#]+)*)", line)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    found += re.findall(r"`tpnode-tui((?:\s+[^`]+)?)`", prose)
    return [" ".join(words.split()) for words in found]


def _links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def _anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_opens_with_the_two_set_up_commands_and_ci_runs_the_second():
    text = _text()
    lines = text.splitlines()
    assert lines[0] == "# tpnode-tui"
    before = text[len(lines[0]) : text.index("```")].strip()
    assert "\n" not in before, f"at most a one-line tagline before the set-up commands: {before!r}"
    assert [b.strip() for b in _fenced(text)[:2]] == list(SETUP)
    between = text.split("```")[2].strip()  # between the first block's end and the second's start
    assert between == "", f"the two commands come one after the other: {between!r}"
    ci = (CHECKOUT / ".ci" / "run").read_text()
    assert re.search(rf"^exec {re.escape(SETUP[1])}\s*$", ci, re.M), ci


def test_the_readme_is_a_guide_of_at_most_300_lines():
    assert len(_text().splitlines()) <= MAX_LINES


def test_the_readme_shows_commands():
    """The check below would pass on a README with no command at all."""
    shown = _commands(_text())
    assert len(shown) >= 10, shown
    for word in ("agent --simulated", "reserve", "shell", "usage", "fleet", "web"):
        assert any(word in c for c in shown), word


@pytest.mark.parametrize("words", sorted(set(_commands(README.read_text()))))
def test_every_command_the_readme_shows_parses_as_written(words):
    argv = shlex.split(words)
    try:
        build_parser(argv).parse_args(argv)
    except UsageError as e:
        pytest.fail(f"tpnode-tui {words}: {e}")


@pytest.mark.parametrize(
    "page", ["README.md", *sorted(p.relative_to(CHECKOUT).as_posix() for p in (CHECKOUT / "docs").glob("*.md"))]
)
def test_every_link_to_a_file_of_the_checkout_leads_to_one(page):
    path = CHECKOUT / page
    for link in _links(path.read_text()):
        if re.match(r"[a-z]+:", link):
            continue  # http:, mailto:
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        assert file.exists(), f"{page}: {link}"
        if anchor and file.suffix == ".md":
            headings = re.findall(r"^#+ (.*)$", file.read_text(), re.M)
            assert anchor in {_anchor(h) for h in headings}, f"{page}: {link}"


def test_the_readme_links_its_docs_and_screenshots():
    links = _links(_text())
    assert any(link.startswith("screenshots/") for link in links)
    assert "docs/README.md" in links
