"""One module per parallelism; each wraps the user's model for a slice of the device mesh."""
