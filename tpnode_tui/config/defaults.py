"""Where the node keeps its things by default: plain strings, importable for nothing.

Here rather than beside their settings (:mod:`.sections`) so that the fastest
command (``status --json`` through the agent, :mod:`tpnode_tui.cli.quick`)
finds the agent's socket without loading the settings' machinery.
"""

DEFAULT_STATE_DIR = "/var/lib/tpnode-tui"
DEFAULT_AGENT_SOCKET = "/run/tpnode-tui/agent.sock"
