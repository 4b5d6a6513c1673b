"""What the dashboard says: every picture's text and every question's, made from the node's facts.

Plain functions from what the node said (its snapshot, already escaped) to
Rich ``Text`` or strings, with no widget and no screen, so what an operator
reads is decided, and tested, without a terminal. The lowest layer of the
dashboard: the widgets, the screens and the app draw what these word.
"""
