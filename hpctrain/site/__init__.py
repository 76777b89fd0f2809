"""Site profiles: lookup, building one from a live cluster, doctor (login side)."""
