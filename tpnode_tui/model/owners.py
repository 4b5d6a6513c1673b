"""Whose a record is: the one rule of ownership, which the node's rules and its clients share."""

from __future__ import annotations

from typing import Optional


def is_owner(owner_uid: Optional[int], owner: str, uid: int, user: str) -> bool:
    """Whether the account ``uid``/``user`` owns what recorded ``owner_uid``
    and ``owner``: by uid where one was recorded, else by name. The node's
    rules are made of it, and a client (the dashboard) asks it to offer only
    what the node would allow."""
    if owner_uid is not None:
        return owner_uid == uid
    return bool(owner) and owner == user
