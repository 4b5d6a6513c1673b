"""What the node keeps in its state dir: the launch queue, the drained cards, the node's log,
and the versioned JSON files they are kept in; and the usage ledger (SQLite), with its report.

Only what has no other home lives here: platform jobs live in container
labels or the process runtime's state file, and use from outside on the
driver.
"""
