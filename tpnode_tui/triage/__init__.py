"""Triage: what the node's service learns over time, and what it does to squatters.

The allocator decides on a reading alone; triage is what comes from watching
readings go by. ``watch`` follows the driver's XID events (NVML, the kernel
log, the simulated scene), ``compare`` tells what changed between two
readings (intruders appearing and leaving, health, ends and expiries, idle
reservations), ``history`` keeps each card's last hour in fixed rings, and
``evict`` ends what squats on a card, by pid and start time. The facts they
act on are below them (whose a process is: ``belonging``; the cards out of
service: ``drains``), since the allocator decides with those too.
"""
