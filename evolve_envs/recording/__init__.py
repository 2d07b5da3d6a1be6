"""What runs leave behind: recorded episodes and per-episode metrics."""
