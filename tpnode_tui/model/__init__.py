"""Pure data for the allocator and everything that displays it: no I/O here.

Snapshots are frozen dataclasses, built afresh on every read and never
updated in place: a reading that could be patched would become a second copy
of the truth that slowly drifts from the driver and the runtime.
"""
