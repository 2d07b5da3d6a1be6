"""What a request passes before a route: caps, token, Host/Origin, identity headers."""
