"""A separate process that writes the usage ledger as fast as it can, for the kill -9 test.

    ledger_child.py STATE_DIR START   every card of an 8-card node held by one
        job of alice's (started at helpers.usage.T0, 50 % used), read once a
        second of the scene's time from START on, with no wait between reads;
        prints each time read once the ledger took it, until killed

Run with tests/ on PYTHONPATH. The scene's clock runs far faster than the
wall's, so minutes are written many times a second and a SIGKILL lands
wherever it lands: inside a transaction, between two, or during a checkpoint.
"""

from __future__ import annotations

import sys
from pathlib import Path

from helpers.callers import ALICE
from helpers.usage import T0, Scene
from tpnode_tui.state.ledger import UsageLedger

CARDS = 8
RUN_ID = "long-run"


def main() -> None:
    state, t = Path(sys.argv[1]), float(sys.argv[2])
    scene = Scene(CARDS)
    scene.hold(RUN_ID, ALICE, range(CARDS), started_at=T0)
    for card in range(CARDS):
        scene.set(card, util=50, mem=1000)
    ledger = UsageLedger(state)
    while True:
        ledger.update(scene.snap(t))
        print(t, flush=True)
        t += 1.0


if __name__ == "__main__":
    main()
