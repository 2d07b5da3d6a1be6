"""HTTP clients for reward services: progress (VLAC-compatible), video score, pickle scorer."""
