"""The reward server (FastAPI + uvicorn) and its model backends."""
