"""The login-node command line: one small module per verb; never imports torch."""
