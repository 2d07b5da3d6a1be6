"""The reward service's routes, one router per protocol (docs/PROTOCOLS.md)."""
