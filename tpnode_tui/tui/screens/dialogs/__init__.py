"""The dashboard's dialogs, one module each, and the form they share (``form``).

The forms check what can be checked without the node (a whole number of
cards, a duration, a run id, no more cards than the node has, a reservation
for someone else from someone who is not an operator) and refuse it next to
the field, keeping everything typed: a typo should cost a keystroke, not the
whole form. What only the node can answer (is there room now? is this within
your card limit?) is the node's to say, after the form closes.
"""
