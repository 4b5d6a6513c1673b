"""What the dashboard knows of the node, decided without a screen.

Plain objects, no widgets: the node's readings and how fresh they are
(``readings``), its log while the events pane shows it (``log``), its cards'
last hour (``history``), and the launches this dashboard asked for
(``launches``). The widgets draw what these hold, and the tests read them
without a terminal (tests/unit/test_tui_follow.py, tests/unit/test_tui_launches.py).
"""
