"""A notice sent to an account's URLs through Apprise, in a child process run as that account.

The agent (root) starts this module in a clean interpreter
(:mod:`tpnode_tui.host.rerun`) for one account at a time and hands it a
sheet on standard input (JSON): the account (uid, gid, groups) and either a
URL to check (``notify add``) or the URLs to send one notice to. It loads
Apprise and every one of its services while still root, then becomes the
account for good, and only then reads any URL: whatever a URL makes Apprise
do (a file it names, a service on this machine) is done with the account's
own rights, never root's. The agent kills it, its whole process group, at its
deadline, so a service that never answers holds nothing of the agent's.

It answers one line of JSON on standard output: ``{"shown": URL}`` (the
URL as Apprise's privacy mode writes it, secrets masked) or ``{"refused":
why}`` for a check, ``{"sent": [true, false, ...]}`` for a send. Apprise's
own log is never passed on: it could quote a secret.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

#: the most of a sheet read: a notice and a few URLs
SHEET_MOST = 256 * 1024
#: Apprise's kinds of notice, as the table of notices names them
KINDS = ("info", "success", "warning", "failure")


def become(sheet: dict[str, Any]) -> None:
    """Become the sheet's account for good (groups, gid, uid: real, effective and saved)."""
    uid, gid = int(sheet["uid"]), int(sheet["gid"])
    if os.geteuid() != 0 or uid == 0:
        return
    os.setgroups([int(g) for g in sheet.get("groups", [])])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def scheme(url: str) -> str:
    """A URL's scheme, for a refusal that must not quote the rest (a token may be anywhere in it)."""
    head = url.split("://", 1)[0] if "://" in url else ""
    return head[:20] if head.isascii() and head.replace("+", "").replace("-", "").isalnum() else ""


def check(apprise: Any, asset: Any, url: str) -> dict[str, Any]:
    service = apprise.Apprise.instantiate(url, asset=asset)
    if service is None:
        known = scheme(url)
        what = f"its scheme {known}:// is not one Apprise knows, or" if known else "it has no scheme, or"
        return {"refused": f"Apprise cannot send to that URL: {what} it is not written as the service takes it"}
    return {"shown": str(service.url(privacy=True))}


def send(apprise: Any, asset: Any, sheet: dict[str, Any]) -> dict[str, Any]:
    kind = sheet.get("kind") if sheet.get("kind") in KINDS else "info"
    sent = []
    for url in sheet["urls"]:
        service = apprise.Apprise.instantiate(url, asset=asset)
        ok = False
        if service is not None:
            try:
                ok = bool(service.notify(body=sheet["text"], title=sheet["title"], notify_type=kind))
            except Exception:  # noqa: BLE001 (a service's failure is this URL's, never the others')
                ok = False
        sent.append(ok)
    return {"sent": sent}


def main() -> int:
    sheet = json.loads(sys.stdin.buffer.read(SHEET_MOST))
    quiet = logging.getLogger("apprise")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    import apprise

    apprise.Apprise.instantiate("json://localhost")  # every service's module loaded, while still root
    asset = apprise.AppriseAsset(storage_mode="memory")
    become(sheet)
    answer = check(apprise, asset, sheet["check"]) if "check" in sheet else send(apprise, asset, sheet)
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
