"""``python -m tpnode_tui.demo train``: the demo jobs' stand-in workload.

A real process, so the demo's cards show a job's process working them and a
stopped job really ends.
"""

from __future__ import annotations

import argparse
import time


def train(steps: int) -> None:
    """A step a second, printed, then done."""
    for step in range(steps):
        print(f"step {step + 1}/{steps}", flush=True)
        time.sleep(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m tpnode_tui.demo")
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("train", help="the demo workload").add_argument("--steps", type=int, default=3600)
    train(parser.parse_args().steps)
