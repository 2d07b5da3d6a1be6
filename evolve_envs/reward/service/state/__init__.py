"""What the routers share: ServiceState, the batcher in front of the backend, the metrics."""
