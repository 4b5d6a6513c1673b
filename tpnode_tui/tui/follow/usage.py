"""Who used which cards over the last day and week, as the node's agent reports it.

The usage view asks the node once when it opens (and again when asked to):
two reports, by account, through the port, as ``tpnode-tui usage`` asks. The
node decides whose rows the caller sees (their own and the total; an
operator, everyone's). A node served in-process keeps no ledger and refuses
in its own words, which are what the view shows; so is any other failure
(an agent not answering), never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Optional

from tpnode_tui.model.errors import TpnodeError, error_line
from tpnode_tui.model.usage import UsageReport
from tpnode_tui.port.node import Node
from tpnode_tui.text.printable import printable, printable_view

log = logging.getLogger(__name__)

DAY_S = 86400.0
#: the spans the view shows, each ending now: (its name, its length)
SPANS: tuple[tuple[str, float], ...] = (("Last 24 hours", DAY_S), ("Last 7 days", 7 * DAY_S))


@dataclass(frozen=True)
class UsageRead:
    """What the node said, read at ``at``: a report for each span, in SPANS' order
    (every name made printable: an owner's name is anyone's text), or why none."""

    at: float
    reports: tuple[tuple[str, UsageReport], ...] = ()
    problem: Optional[str] = None


async def read_usage(node: Node, now: float) -> UsageRead:
    """Both spans' reports by account, asked together; the node's refusal or the
    failure, in one printable line, if either cannot be had."""
    try:
        reports = await asyncio.gather(*(node.usage(now - length, now, "user") for _, length in SPANS))
    except TpnodeError as e:
        return UsageRead(now, problem=printable(error_line(e)))
    except Exception as e:  # a bug of ours: said in the view, with the traceback in the log
        log.warning("could not read the node's usage", exc_info=True)
        return UsageRead(now, problem=printable(f"{type(e).__name__}: {e}"))
    named = tuple((name, printable_view(report)) for (name, _), report in zip(SPANS, reports))
    return UsageRead(now, named)
