"""Words: the plain phrases the CLI and the dashboard share, and other people's text made safe
for a terminal.
"""
