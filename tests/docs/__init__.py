"""The README and the docs pages: every code block runs."""
