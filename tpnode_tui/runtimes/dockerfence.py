"""Whether a container can open only its own cards' device files, read from what the engine says of it.

Docker's own device cgroup fences a container given only its cards (a device
request naming them, or ``NVIDIA_VISIBLE_DEVICES`` for NVIDIA's runtime).
Whether a container is so fenced is read from ``docker inspect`` of the
container itself, never from what the runtime meant to ask: anything that
gives it more (privileged, a ``/dev/nvidia*`` device, a rule for NVIDIA's
major, every card or a count) makes it "not fenced", saying which. See
docs/architecture.md, section 'The policy, and what people see'.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from tpnode_tui.model.jobs import DeviceFence

MECHANISM = "docker"
#: the major of NVIDIA's card files (a device rule naming it, or every major, lets a container open them)
_NVIDIA_MAJOR = "195"
#: what an ended container says: it is not inspected, so its HostConfig is not read
ENDED = "it has ended (an ended container is not inspected)"
#: what a container given no card at all says (TUNEPLANE_DOCKER_GPU_MODE=none)
NO_CARD = (
    "it is given no card, neither by a device request nor by NVIDIA_VISIBLE_DEVICES "
    "(TUNEPLANE_DOCKER_GPU_MODE=none), so what it can open is for the engine's default runtime to say"
)


def _rule_opens_nvidia(rule: str) -> bool:
    """Whether a device cgroup rule ("c 195:* rwm", "a *:* rwm") allows NVIDIA's card files."""
    kind, _, rest = rule.strip().partition(" ")
    major = rest.split(":", 1)[0]
    return kind in ("a", "c") and (kind == "a" or major in ("*", _NVIDIA_MAJOR))


def _more_than_its_own(host: Mapping[str, Any]) -> str:
    """What in ``HostConfig`` lets the container open more than its own cards; "" when nothing."""
    if host.get("Privileged"):
        return "it is privileged, and a privileged container may open every device"
    given = [str(d.get("PathOnHost")) for d in host.get("Devices") or [] if _is_nvidia(d.get("PathOnHost"))]
    if given:
        return f"it is given {', '.join(given)} as devices of its own"
    rules = [str(r) for r in host.get("DeviceCgroupRules") or [] if _rule_opens_nvidia(str(r))]
    if rules:
        return f"its device cgroup rule {rules[0]!r} lets it open NVIDIA's devices"
    return ""


def _is_nvidia(path: Any) -> bool:
    return isinstance(path, str) and path.startswith("/dev/nvidia")


def _requests_say(requests: Sequence[Mapping[str, Any]], own: set[str]) -> str:
    """What is wrong with the device requests for a container whose own devices are ``own``; "" when nothing."""
    for request in requests:
        count = request.get("Count") or 0
        ids = [str(i) for i in request.get("DeviceIDs") or []]
        if count == -1:
            return "its device request asks the engine for every card"
        if count or not ids:
            return f"its device request asks the engine for {count} cards, not its own by name"
        if not set(ids) <= own:
            return f"its device request names {', '.join(ids)}, not only its own ({', '.join(sorted(own))})"
    return ""


def _visible(env: Sequence[Any]) -> Optional[str]:
    """``NVIDIA_VISIBLE_DEVICES`` as the container's environment sets it (the last one wins); None when unset."""
    found = None
    for entry in env:
        name, eq, value = str(entry).partition("=")
        if eq and name == "NVIDIA_VISIBLE_DEVICES":
            found = value
    return found


def container_fence(detail: Mapping[str, Any], own: Sequence[str]) -> DeviceFence:
    """Whether the inspected container ``detail`` can open only ``own``: the ids its
    labels say it holds (card indices, or MIG devices' uuids), as the engine names them."""
    host = detail.get("HostConfig") or {}
    more = _more_than_its_own(host)
    if more:
        return DeviceFence.missing(more)
    requests = host.get("DeviceRequests") or []
    if requests:
        wrong = _requests_say(requests, set(own))
        return DeviceFence.missing(wrong) if wrong else DeviceFence.by(MECHANISM)
    visible = _visible((detail.get("Config") or {}).get("Env") or [])
    if visible is None:
        return DeviceFence.missing(NO_CARD)
    if not set(visible.split(",")) <= set(own):
        return DeviceFence.missing(f"its NVIDIA_VISIBLE_DEVICES={visible!r} does not name only its own cards")
    return DeviceFence.by(MECHANISM)
