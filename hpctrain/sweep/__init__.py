"""Sweeps: the plan, the grid, their status (login side)."""
