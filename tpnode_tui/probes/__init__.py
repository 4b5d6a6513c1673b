"""Probes: what the driver says about each card, asked afresh each time."""
