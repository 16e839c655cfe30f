"""The chaos suite's parts: worker processes, the fault controller, and the checker of their records."""
