"""The idle dashboard of two installed copies side by side.

    python bench/dashboard_compare.py OLD_PREFIX NEW_PREFIX [ROUNDS] [WINDOW_S]

Each prefix is a virtual environment the package is installed in, not
editable (``python3 -m venv P && P/bin/pip install .`` at the commit to
compare). Each round starts one dashboard of each copy in turn, in a rotated
order, on a simulated node of 8 idle cards (section 4's pane, scene and
window: see bench/dashboard.py), and times its first full frame and its CPU
over the window. Prints each copy's medians with every round's figure, and
the new copy's as a share of the old's: a figure recorded on another machine
does not carry to this one, two copies measured in one run do.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from dashboard import measure


def main(old: Path, new: Path, rounds: int, window_s: float) -> None:
    copies = {"old": old, "new": new}
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in copies}
    with tempfile.TemporaryDirectory(prefix="tpb-dc-", dir="/tmp") as tmp:
        for n in range(rounds):
            order = list(copies) if n % 2 == 0 else list(reversed(copies))
            for name in order:
                where = Path(tmp) / f"{name}{n}"
                where.mkdir()
                command = [str(copies[name] / "bin" / "tpnode-tui"), "--interval", "1"]
                results[name].append(measure(8, window_s, where, command))
    medians = {}
    for name, runs in results.items():
        frames, cpus, rss = (list(x) for x in zip(*runs))
        medians[name] = (statistics.median(frames), statistics.median(cpus))
        print(
            f"{name} ({copies[name]}): first full frame {medians[name][0]:.2f} s "
            f"({', '.join(f'{f:.2f}' for f in frames)}), idle CPU {medians[name][1]:.2f} % of a core "
            f"({', '.join(f'{c:.2f}' for c in cpus)}), {statistics.median(rss):.1f} MB"
        )
    print(
        f"new / old: first frame {medians['new'][0] / medians['old'][0]:.2f}, "
        f"idle CPU {medians['new'][1] / medians['old'][1]:.2f} ({rounds} rounds of {window_s:g} s, 8 idle cards)"
    )


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4, 5):
        raise SystemExit(__doc__)
    main(
        Path(sys.argv[1]),
        Path(sys.argv[2]),
        int(sys.argv[3]) if len(sys.argv) > 3 else 4,
        float(sys.argv[4]) if len(sys.argv) > 4 else 30.0,
    )
