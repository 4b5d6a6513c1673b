"""What a job names that this node cannot show: cards it does not have, MIG slices the driver no longer reports.

Such a job still holds what it names until it ends (its slice's card is never
handed out meanwhile), so nothing is dropped; the job is shown with a problem
saying what is missing and what to do, since whoever looks needs to know why.
"""

from __future__ import annotations

from dataclasses import replace

from tpnode_tui.model.facts import ProbeReading
from tpnode_tui.model.jobs import JobState
from tpnode_tui.text.render import cards_words


def note_missing(job: JobState, total: int, reading: ProbeReading) -> JobState:
    """``job`` with a problem added for each card and MIG slice it names that cannot be seen."""
    return _note_missing_slices(_note_missing_cards(job, total), reading)


def _note_missing_cards(job: JobState, total: int) -> JobState:
    """``job`` with a problem added when it names cards this node does not have.

    The runtime cannot know the card count, so a label naming card 99 reads
    there without complaint. Such a card holds nothing and is never offered,
    but whoever wrote it meant some real card, which may be in use unaccounted
    for: that has to be said. With no card count known nothing is claimed.
    """
    missing = sorted({i for i in (*job.gpus, *(ref.card for ref in job.slices)) if i >= total})
    if total <= 0 or not missing:
        return job
    problem = (
        f"names {cards_words(missing)}, which this node does not have (its cards are "
        f"0-{total - 1}); check the job's cards"
    )
    return replace(job, problems=job.problems + (problem,))


def _note_missing_slices(job: JobState, reading: ProbeReading) -> JobState:
    """``job`` with a problem added for each MIG slice it lists that the driver
    does not report (destroyed, or its card reset or whole again): it still
    holds it, and its card, until it ends, and whoever looks needs to know why.
    A card whose MIG devices cannot be listed says nothing either way."""
    problems = []
    for ref in job.slices:
        card = reading.card(ref.card)
        if card is None or card.slices is None or any(s.uuid == ref.uuid for s in card.slices):
            continue
        what = f"MIG device {ref.uuid}" + (f" ({ref.profile})" if ref.profile else "")
        where = "" if card.mig_mode else f", and card {ref.card} is not in MIG mode now"
        problems.append(
            f"holds {what} of card {ref.card}, which the driver no longer reports{where}; "
            f"stop the job (tpnode-tui stop {job.key}) if it is gone"
        )
    return replace(job, problems=job.problems + tuple(problems)) if problems else job
