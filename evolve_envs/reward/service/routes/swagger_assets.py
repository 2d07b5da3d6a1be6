"""Serve the Swagger UI page (``/docs``) from the ``swagger-ui-bundle`` package, not a CDN, so it
renders offline (FastAPI's CDN links without the package, with a warning).

Example:
    >>> from fastapi import FastAPI
    >>> add_local_docs(FastAPI(docs_url=None))
    True
"""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

__all__ = ["ASSETS_PATH", "add_local_docs", "swagger_ui_dir"]

ASSETS_PATH = "/docs-assets"

log = logging.getLogger(__name__)


def swagger_ui_dir() -> Path | None:
    """The installed Swagger UI distribution folder, or None without ``swagger-ui-bundle``."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return None
    path = Path(swagger_ui_path)
    return path if (path / "swagger-ui-bundle.js").is_file() else None


def add_local_docs(app: FastAPI, path: str = "/docs") -> bool:
    """Add the ``path`` Swagger UI page to ``app`` (built with ``docs_url=None``).

    Returns True when the page uses the locally installed assets, False when it falls back to
    the CDN because ``swagger-ui-bundle`` is not installed.
    """
    assets = swagger_ui_dir()
    openapi_url = app.openapi_url or "/openapi.json"
    title = f"{app.title} - Swagger UI"
    if assets is None:
        log.warning("swagger-ui-bundle is not installed: %s loads Swagger UI from a CDN", path)
        page = get_swagger_ui_html(openapi_url=openapi_url, title=title)
    else:
        app.mount(ASSETS_PATH, StaticFiles(directory=assets), name="docs-assets")
        page = get_swagger_ui_html(
            openapi_url=openapi_url,
            title=title,
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png",
        )

    async def swagger_ui() -> HTMLResponse:
        return page

    app.add_api_route(path, swagger_ui, methods=["GET"], include_in_schema=False)
    return assets is not None
