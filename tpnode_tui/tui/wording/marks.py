"""The colours of what needs attention, wherever the dashboard shows it.

Each state's badge (its word and colour) is the page's as well as the
dashboard's: it is in :mod:`tpnode_tui.text.badges`.
"""

from __future__ import annotations

#: text that must be dealt with: an unhealthy card, someone else's process on a held card
ERROR = "#ef5350"
#: text that needs attention: a problem on a card that keeps its state
WARNING = "#ffb300"
#: text about a drain, in the drained badge's colour made readable on a dark background
DRAINED_TEXT = "#4dd0e1"
#: text about what is as it should be: a check the card passed
PASSED_TEXT = "#66bb6a"
