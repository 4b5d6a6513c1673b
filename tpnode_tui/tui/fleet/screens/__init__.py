"""The fleet view's screens: the table of nodes (``main``) and one node's cards, read-only (``node``)."""
