"""The dashboard's widgets: the card grid, the detail pane, the jobs table, the events pane, the sparklines.

Each draws what it is given (what tpnode_tui/tui/follow holds, worded by
tpnode_tui/tui/wording) and asks the node nothing; the screens lay them out.
"""
