"""One reconciler per kind: observe, then run the plan through the executor."""
