"""What the main screen's keys do to the node, each from its key to the node's answer.

One module per kind of action, as the node's service has them: launches
(launch, reserve, and what became of a launch queued from here), jobs (stop,
extend, cancel, reclaim) and operators (drain, undrain, evict); and the demo's
keys. Each flow starts where its key is pressed, on what is selected then
(``Desk.selection``): it is refused at once, read-only or while the node does
not answer; it asks first where it acts on someone's work (a dialog, awaited
in a worker, so what it asks and what it then does read in order); it makes
one call on the node, which checks it against who asks exactly as the CLI's
calls are; and it says what came of it, in the node's words when refused.
"""
