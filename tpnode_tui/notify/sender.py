"""A notice sent to an account's URLs through Apprise, in a child process run as that account.

The agent (root) starts this module in a clean interpreter for one account
and hands it a JSON sheet on standard input: the account, and a URL to check
or the URLs to send one notice to. It loads Apprise while still root, then
becomes the account for good before reading any URL, so whatever a URL makes
Apprise do is done with the account's rights. It answers one line of JSON:
``{"shown": URL}`` (secrets masked) or ``{"refused": why}`` for a check,
``{"sent": [true, false, ...]}`` for a send; Apprise's own log, which could
quote a secret, is never passed on. See docs/architecture.md, section
'Telling each account'.
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
