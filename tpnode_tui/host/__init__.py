"""This machine's own answers about people and processes: who a caller is (from the kernel),
who a pid is (from /proc).
"""
