"""The node agent: one privileged process serving the node to every account over a Unix socket."""
