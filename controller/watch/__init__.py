"""What the caches hold and which keys an event means."""
