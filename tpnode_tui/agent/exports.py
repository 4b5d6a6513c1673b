"""What the agent tells the world beyond its socket, each only when configured:
its snapshot to the fleet's Redis (``TUNEPLANE_FLEET_URL``) and Prometheus
metrics on a TCP address (``TUNEPLANE_METRICS_ADDR``).

Both only read the service's latest reading; neither is in the allocation
path, and neither failing stops the agent serving its node. redis-py is
imported only when a fleet URL is set.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Optional

from aiohttp import web

from tpnode_tui.config.settings import Settings
from tpnode_tui.model.errors import ConfigError
from tpnode_tui.service import NodeService

if TYPE_CHECKING:
    from tpnode_tui.fleet.publisher import FleetPublisher

log = logging.getLogger("tpnode_tui.agent")


class Exports:
    def __init__(self) -> None:
        self._publisher: Optional[FleetPublisher] = None
        self._publishing: Optional[asyncio.Task[None]] = None
        self._metrics: Optional[web.AppRunner] = None

    async def start(self, settings: Settings, service: NodeService) -> None:
        if settings.agent.metrics_addr is not None:
            from tpnode_tui.agent.metrics import metrics_app

            host, port = settings.agent.metrics_addr
            self._metrics = web.AppRunner(metrics_app(service, settings.fleet.node), access_log=None)
            await self._metrics.setup()
            try:
                await web.TCPSite(self._metrics, host, port).start()
            except OSError as e:
                raise ConfigError(f"TUNEPLANE_METRICS_ADDR={host}:{port} cannot be served: {e.strerror or e}") from None
            log.info("serving Prometheus metrics on http://%s:%d/metrics", host, port)
        if settings.fleet.url is not None:
            from tpnode_tui.fleet.publisher import FleetPublisher

            publisher = FleetPublisher(
                settings.fleet.url,
                settings.fleet.url_safe or "",
                settings.fleet.node,
                settings.fleet.publish_s,
                ssh=str(settings.fleet.ssh_address or ""),
            )
            self._publisher = publisher
            self._publishing = asyncio.ensure_future(publisher.run(service))
            log.info(
                "publishing to the fleet at %s as %s (instance %s), at least every %g s",
                settings.fleet.url_safe,
                settings.fleet.node,
                publisher.instance,
                settings.fleet.publish_s,
            )

    async def close(self) -> None:
        if self._publishing is not None:
            self._publishing.cancel()
            try:
                await self._publishing
            except asyncio.CancelledError:
                pass
            except Exception:  # the agent's own shutdown must still run to its end
                log.warning("the fleet publisher had stopped with an error", exc_info=True)
        if self._publisher is not None:
            await self._publisher.close()
        if self._metrics is not None:
            await self._metrics.cleanup()
