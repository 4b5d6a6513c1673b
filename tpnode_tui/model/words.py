"""Cards in a few words ("card 4", "cards 0-3,7"), for every message that names them.

Below every other module of the model, so a message anywhere names cards the
same way.
"""

from __future__ import annotations

from typing import Iterable, Union


def card_ranges(cards: Iterable[int]) -> str:
    """Card indices in order, three or more in a row as a range: "0-3,7,9-12".

    A node of 256 cards has lists of 255 indices, which as plain lists fill a
    screen and push everything else off it. Two neighbours stay "0,1": as a
    range they would be no shorter.
    """
    ordered = sorted(set(cards))
    parts: list[str] = []
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        if end - start >= 2:
            parts.append(f"{ordered[start]}-{ordered[end]}")
        else:
            parts.extend(map(str, ordered[start : end + 1]))
        start = end + 1
    return ",".join(parts)


def cards_words(cards: Union[int, Iterable[int]]) -> str:
    """A count as "1 card" / "3 cards"; a list as "card 4" / "cards 0,1" / "cards 0-254" / "no cards"."""
    if isinstance(cards, int):
        return f"{cards} card" if cards == 1 else f"{cards} cards"
    listed = tuple(cards)
    if not listed:
        return "no cards"
    return ("card " if len(set(listed)) == 1 else "cards ") + card_ranges(listed)
