"""``tpnode-tui fleet [--json]``: the fleet, once as JSON or live in a terminal view."""
from __future__ import annotations

import asyncio
import json

from ..config import Settings
from ..model import ConfigError
from .record import fleet_json


def run_fleet(settings: Settings, *, as_json: bool, interval: float) -> int:
    if settings.fleet_url is None:
        raise ConfigError("tpnode-tui fleet reads what the nodes' agents publish: set "
                          "TUNEPLANE_FLEET_URL to their Redis (redis://host:port/db)")
    safe = settings.fleet_url_safe or ""
    if as_json:
        from .reader import read_once

        print(json.dumps(fleet_json(asyncio.run(read_once(settings.fleet_url, safe))), indent=2))
        return 0
    from ..tui.fleet import run_fleet_view  # the only import of the UI, and only when asked for

    return run_fleet_view(settings.fleet_url, safe, interval)
