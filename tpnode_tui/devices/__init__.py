"""Which device files a job may open: the fence that makes a card's assignment physical.

``CUDA_VISIBLE_DEVICES`` binds a job to nothing; the kernel's device cgroup
checks every open of a device file, so a job whose cgroup allows only its own
NVIDIA minors cannot reach another job's card, nor can anything it starts.
:mod:`.nvidia` reads the driver's numbers, :mod:`.rules` decides which minors,
:mod:`.assembler`, :mod:`.program` and :mod:`.bpf` make and attach the cgroup
v2 program, :mod:`.v1` uses the v1 controller, and :mod:`.fence` is what a
runtime calls. See docs/architecture.md, section 'The fence'.
"""
