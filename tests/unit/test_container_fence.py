"""Whether a container is fenced to its cards, decided from what ``docker inspect`` says of it.

One test per rule: what gives a container more than its own cards makes it
"not fenced", saying which; a device request naming only its own cards (or
NVIDIA_VISIBLE_DEVICES naming them, for NVIDIA's runtime) is Docker's fence.
"""

from __future__ import annotations

import pytest

from tpnode_tui.model.jobs import DeviceFence
from tpnode_tui.runtimes.dockerfence import NO_CARD, container_fence

OWN = ["1", "3"]
REQUEST = {"Driver": "nvidia", "Count": 0, "DeviceIDs": ["1", "3"], "Capabilities": [["gpu"]]}


def inspected(host: dict | None = None, env: list[str] | None = None) -> dict:
    return {
        "HostConfig": {"Privileged": False, "Devices": [], "DeviceCgroupRules": None, **(host or {})},
        "Config": {"Env": env},
    }


def test_a_device_request_naming_its_own_cards_is_dockers_fence():
    assert container_fence(inspected({"DeviceRequests": [REQUEST]}), OWN) == DeviceFence.by("docker")


def test_a_request_for_fewer_than_its_own_is_fenced_too():
    fewer = dict(REQUEST, DeviceIDs=["3"])
    assert container_fence(inspected({"DeviceRequests": [fewer]}), OWN).fenced


def test_a_mig_device_named_by_its_uuid_is_fenced():
    mig = "MIG-5e6f7a8b-9c0d-5e1f-a2b3-c4d5e6f7a8b9"
    request = dict(REQUEST, DeviceIDs=[mig])
    assert container_fence(inspected({"DeviceRequests": [request]}), [mig]).fenced


@pytest.mark.parametrize(
    "host, says",
    [
        ({"Privileged": True}, "it is privileged, and a privileged container may open every device"),
        (
            {"Devices": [{"PathOnHost": "/dev/nvidia0", "PathInContainer": "/dev/nvidia0"}]},
            "it is given /dev/nvidia0 as devices of its own",
        ),
        ({"DeviceCgroupRules": ["c 195:* rmw"]}, "its device cgroup rule 'c 195:* rmw' lets it open NVIDIA's devices"),
        ({"DeviceCgroupRules": ["a *:* rwm"]}, "its device cgroup rule 'a *:* rwm'"),
        ({"DeviceCgroupRules": ["c *:* m"]}, "its device cgroup rule 'c *:* m'"),
        ({"DeviceRequests": [dict(REQUEST, Count=-1, DeviceIDs=None)]}, "asks the engine for every card"),
        ({"DeviceRequests": [dict(REQUEST, Count=2, DeviceIDs=None)]}, "asks the engine for 2 cards, not its own"),
        ({"DeviceRequests": [dict(REQUEST, DeviceIDs=["1", "2"])]}, "names 1, 2, not only its own (1, 3)"),
    ],
)
def test_anything_more_than_its_own_cards_is_not_fenced_and_says_what(host, says):
    fence = container_fence(inspected({"DeviceRequests": [REQUEST], **host}), OWN)
    assert not fence.fenced and says in fence.problem


def test_other_devices_and_rules_leave_the_fence_as_it_is():
    host = {
        "DeviceRequests": [REQUEST],
        "Devices": [{"PathOnHost": "/dev/fuse", "PathInContainer": "/dev/fuse"}],
        "DeviceCgroupRules": ["c 10:229 rwm"],
    }
    assert container_fence(inspected(host), OWN).fenced


def test_nvidia_visible_devices_naming_its_own_cards_is_fenced_by_nvidias_runtime():
    env = ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=1,3", "CUDA_VISIBLE_DEVICES=0,1"]
    assert container_fence(inspected(env=env), OWN).fenced  # the last one wins, as in the engine


@pytest.mark.parametrize("visible", ["all", "0,1,3", ""])
def test_nvidia_visible_devices_naming_more_is_not_fenced(visible):
    fence = container_fence(inspected(env=[f"NVIDIA_VISIBLE_DEVICES={visible}"]), OWN)
    assert not fence.fenced and f"NVIDIA_VISIBLE_DEVICES={visible!r} does not name only its own" in fence.problem


def test_a_container_given_no_card_at_all_cannot_be_vouched_for():
    assert container_fence(inspected(env=["PATH=/bin"]), OWN) == DeviceFence.missing(NO_CARD)
