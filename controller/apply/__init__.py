"""The I/O side of a pass."""
