"""How the verbs print: progress bars and other views of what the API returns."""
