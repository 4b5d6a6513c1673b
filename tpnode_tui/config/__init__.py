"""The node's settings: TUNEPLANE_* variables and flags, each checked at start-up.

:mod:`.settings` loads them into sections declared in :mod:`.sections`, each
read by :mod:`.readers`; :mod:`.values` (numbers, durations), :mod:`.ssh`,
:mod:`.statedir` and :mod:`.redact` serve the rest of the package too.
"""
