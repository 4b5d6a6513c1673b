"""``tpnode-tui fleet``: every node that publishes to the fleet's Redis, one row each. It only reads.

A row is a node: its name and series, a strip with one coloured cell per card
(the node grid's colours), free of total, the widest run of consecutive free
cards, unhealthy, drained and intruded cards, and when it was last seen. A
node that stopped publishing, or whose publication cannot be read, or that two
agents claim, shows its cards as unknown and counts none as free. ``g``
opens a node's card grid and detail pane from its published snapshot, with
no action on it; ``enter`` its own dashboard, over SSH, as whoever asks.

Laid out like the node's dashboard: the app (``app``) follows the fleet
(``follow``); its main screen (``screens.main``) draws the table and opens a
node's grid (``screens.node``), in the words of ``wording``; ``ssh`` runs a
node's own dashboard. Every string here came from Redis, which any node can
write: names, series, problems and snapshots are escaped (``printable``) as
they are shown, and tables are given ``Text`` cells, never markup.
"""
