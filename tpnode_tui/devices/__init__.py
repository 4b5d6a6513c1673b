"""Which device files a job may open: the fence that makes a card's assignment physical.

``CUDA_VISIBLE_DEVICES`` only tells a job which cards are its own; any process
may ignore it and open another card's device file. The kernel's device cgroup
checks every open of a device file against rules for the cgroup the process is
in, whatever the path, so a job whose cgroup carries the rule "of NVIDIA's
devices, only these" cannot reach another job's card, and neither can anything
it starts: children stay in their parent's cgroup, ``setsid`` or not.

* :mod:`.nvidia` reads what the driver says: its majors (``/proc/devices``), the
  minors of the MIG capabilities (``mig-minors``), a card's minor.
* :mod:`.rules` decides, purely, which minors a job may open and which it may not.
* :mod:`.assembler` and :mod:`.program` build the cgroup v2 device program,
  :mod:`.bpf` loads and attaches it through ``bpf(2)``.
* :mod:`.v1` does the same with the cgroup v1 ``devices`` controller.
* :mod:`.fence` is what a runtime calls: fence this cgroup, or say why not.
"""
