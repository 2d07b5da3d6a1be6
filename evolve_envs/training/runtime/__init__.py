"""What a run needs from Ray besides its workers: placement on the cluster, the weight registry,
the pause of the synchronous barrier, the head's watch, remote errors in one line."""
