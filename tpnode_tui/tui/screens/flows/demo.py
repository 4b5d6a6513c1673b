"""The demo's keys: a card raises an XID, the probe goes blind, an outsider uses a card."""

from __future__ import annotations

from tpnode_tui.tui.screens.flows.desk import Desk


def raise_xid(desk: Desk) -> None:
    card = desk.selection().selected_card()
    demo = desk.session.demo
    if demo is None or card is None:
        return
    demo.raise_xid(card.index)
    desk.notify(
        f"Card {card.index} reports XID 48 (double-bit ECC error): the node drains it "
        "until an operator undrains it (e shows the log).",
        title="Demo",
        timeout=6,
    )


def toggle_blind(desk: Desk) -> None:
    demo = desk.session.demo
    if demo is None:
        return
    blind = demo.toggle_blind()
    desk.notify(
        "Probe-blind: use from outside can no longer be seen." if blind else "The probe sees use from outside again.",
        title="Demo",
        timeout=4,
    )


def toggle_external(desk: Desk) -> None:
    card = desk.selection().selected_card()
    demo = desk.session.demo
    if demo is None or card is None:
        return
    on = demo.toggle_external(card.index)
    desk.notify(
        f"An outside process now uses card {card.index}." if on else f"Card {card.index} has no outside user any more.",
        title="Demo",
        timeout=4,
    )
