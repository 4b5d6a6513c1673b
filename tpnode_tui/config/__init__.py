"""The node's settings: TUNEPLANE_* variables and flags, each checked at start-up."""
