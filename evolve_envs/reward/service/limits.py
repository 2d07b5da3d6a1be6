"""The server's default limits, in one place (the CLI, `create_app` and the docs read them).

Example:
    >>> DEFAULT_LIMITS["max_frames"]
    1024
"""

from __future__ import annotations

__all__ = ["DEFAULT_LIMITS"]

DEFAULT_LIMITS: dict[str, int] = {
    "max_body_bytes": 64 * 1024 * 1024,
    # A decoded body (pickle or JSON), counted through shared references (a pickle's memo lets
    # 2 KB describe 10^40 paths): values, keys and containers; nesting levels. Its str/bytes
    # characters count against max_body_bytes likewise (`evolve_envs.reward.protocol.body_budget`).
    "max_body_nodes": 100_000,
    "max_body_depth": 64,
    "max_frames": 1024,
    "max_image_side": 4096,
    "max_video_frames": 10000,
    # Decoded pixels per request, charged from image headers before decoding (JPEGs count at
    # their DCT-reduced size): 1,024 frames of 512x512.
    "max_request_pixels": 1024 * 512 * 512,
    # Memory one image's decoding may take at its peak, estimated from its header (a 4096x4096
    # RGB PNG takes 65 MiB in Pillow; a JPEG is decoded DCT-reduced), and one /score video frame
    # (width x height x 3). Images are decoded one at a time.
    "max_image_decode_bytes": 32 * 1024 * 1024,
    # /score caller knobs: frames sampled per video, pixels per sampled frame.
    "max_nframes": 128,
    # /score decoding work: frames x width x height of the whole video (2^31: e.g. 2,300 frames
    # of 1280x720, or 128 of 4096x4096)
    "max_video_decode_pixels": 2**31,
    "max_video_pixels": 4 * 448 * 448,
    # characters in a task or prompt (tokenising is the caller's cost too)
    "max_text_chars": 8192,
    # connections (evolve-reward-server): a request's headers must arrive within
    # header_timeout_s of its first byte (or of the connection's opening), the whole request
    # within read_timeout_s
    "header_timeout_s": 10,
    "read_timeout_s": 60,
    # open connections: at most this many, and never more than RLIMIT_NOFILE leaves after
    # `connection_fd_headroom` descriptors for the process itself (`connections.connection_cap`)
    "max_connections": 512,
    "connection_fd_headroom": 64,
    "max_concurrent_requests": 256,
}
