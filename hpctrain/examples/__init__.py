"""Example entrypoints that users copy: digits (scikit-learn's handwritten digits) and a GPT."""
