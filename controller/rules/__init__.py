"""Pure domain rules: no I/O, no clock reading, no threads."""
