"""Runtimes: where the platform's own jobs live (container labels, the state file)."""
