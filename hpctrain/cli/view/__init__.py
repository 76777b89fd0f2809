"""What the verbs share: how they print, their common arguments, and the files they write for the user."""
