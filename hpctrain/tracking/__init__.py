"""Tracked runs: the index, one poll for every run, health, logs (login side)."""
