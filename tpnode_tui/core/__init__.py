"""The node's rules, pure: from jobs and one probe reading to one state per card and slice;
whose a process is; who may do what; where a multi-card job goes; what an XID means.

No I/O here: each rule is a function of what it is given, so each is tested on
its own and the allocator, the service and the dashboard judge alike.
"""
