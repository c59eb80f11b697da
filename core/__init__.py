"""The vocabulary every package shares: errors (the API's error types), ids, logs, the metrics
instruments, the model catalogue and the heap watch. It imports no other package of the
project (docs/architecture.md)."""
