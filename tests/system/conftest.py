"""Fixtures the fence's system tests share: the driver's stand-ins and a node fenced with them."""

from __future__ import annotations

import shutil
from typing import Iterator

import pytest

from helpers.agents import SharedNode
from helpers.fence import Driver, scene_cards
from helpers.services import write_scene


@pytest.fixture
def driver() -> Iterator[Driver]:
    """The driver's /proc files and device nodes (mknod), removed afterwards."""
    made = Driver()
    try:
        yield made
    finally:
        shutil.rmtree(made.root)


@pytest.fixture
def fenced_node(accounts, driver) -> Iterator[SharedNode]:
    """A real root agent on a simulated node, its fence reading the driver's stand-ins."""
    with SharedNode.started(accounts, "tpn-fenced-", **driver.settings) as node:
        write_scene(node.scene, scene_cards())
        yield node
