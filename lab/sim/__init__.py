"""Simulated runs: the real server, client and policies in virtual time over priced stage steps."""
