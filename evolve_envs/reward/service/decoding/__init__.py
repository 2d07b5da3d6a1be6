"""A client's bytes into arrays within the limits: images, base64 images, videos."""
