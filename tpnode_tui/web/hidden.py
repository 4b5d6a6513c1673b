"""Other accounts' command lines and process names, hidden from the web page.

A page is read by whoever reaches its address, often without logging into the
node: a command line can carry a data set's name, a path, a token given as an
argument (gpustat #101). So everything the page serves (the page, its JSON
and its text) is made from the snapshot as hidden here, once per reading:
the command line of every process, job and queued launch that is not the web
page's own account's reads :data:`HIDDEN`, and so does the part of a card's
warning that quoted it. ``TUNEPLANE_WEB_SHOW_COMMANDS`` shows them all.

What stays is what the dashboard shows every account anyway: who (the
account), which pid, how much memory, which run id, since when.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from tpnode_tui.model.jobs import JobState, QueuedLaunch
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.views import CardView, HolderInfo, SliceView
from tpnode_tui.text.render import process_words

#: what a command line reads where it is hidden
HIDDEN = "(hidden)"


def hide_others(snap: NodeSnapshot, uid: int) -> NodeSnapshot:
    """``snap`` with every command line not of account ``uid`` hidden; one whose
    account is not known is hidden too (unknown is not "ours")."""
    return replace(
        snap,
        cards=tuple(_card(card, uid) for card in snap.cards),
        jobs=tuple(_job(job, uid) for job in snap.jobs),
        queue=tuple(_queued(q, uid) for q in snap.queue),
    )


def _hidden(command: Optional[str], owner_uid: Optional[int], uid: int) -> bool:
    return command is not None and owner_uid != uid


def _job(job: JobState, uid: int) -> JobState:
    if not job.command or job.uid == uid:
        return job
    return replace(job, command=(HIDDEN,))


def _opt_job(job: Optional[JobState], uid: int) -> Optional[JobState]:
    return None if job is None else _job(job, uid)


def _queued(q: QueuedLaunch, uid: int) -> QueuedLaunch:
    return q if not q.command or q.uid == uid else replace(q, command=(HIDDEN,))


def _holders(holders: tuple[HolderInfo, ...], uid: int) -> tuple[tuple[HolderInfo, ...], dict[str, str]]:
    """The holders hidden, and what each changed holder's words in a warning become."""
    shown = []
    said: dict[str, str] = {}
    for h in holders:
        if _hidden(h.command, h.uid, uid):
            hidden = replace(h, command=HIDDEN)
            said[process_words(h)] = process_words(hidden)
            h = hidden
        shown.append(h)
    return tuple(shown), said


def _warning(warning: Optional[str], said: dict[str, str]) -> Optional[str]:
    """A warning that quoted a hidden holder's command (an intruder's), quoting it hidden."""
    if warning is None:
        return None
    for words, hidden in said.items():
        warning = warning.replace(f"({words})", f"({hidden})")
    return warning


def _slice(piece: SliceView, uid: int, said: dict[str, str]) -> SliceView:
    holders, more = _holders(piece.holders, uid)
    said.update(more)
    return replace(piece, holders=holders, job=_opt_job(piece.job, uid), warning=_warning(piece.warning, more))


def _card(card: CardView, uid: int) -> CardView:
    holders, said = _holders(card.holders, uid)
    slices = tuple(_slice(piece, uid, said) for piece in card.slices)
    return replace(
        card, holders=holders, job=_opt_job(card.job, uid), slices=slices, warning=_warning(card.warning, said)
    )
