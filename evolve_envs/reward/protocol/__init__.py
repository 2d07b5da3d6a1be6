"""What the reward service and its clients share, and nothing else: the wire models, the pickle
codec, the decoded-body budget, the critic arithmetic and the token rules (stdlib, NumPy and
pydantic only).
"""
