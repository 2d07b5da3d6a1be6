"""Running the service: the server program, its options, uvicorn hardening, Ray Serve."""
