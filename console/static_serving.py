"""Static files from the ASGI process itself: the finders' view, plus plotly.js taken from the installed package.

One process serves everything (no separate web server, no collectstatic step), so /static/ is answered by
Django's staticfiles view in every mode, not only in DEBUG. plotly.js comes from the `plotly` wheel, so the
console's charts work with no network and no vendored copy in the repository.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import BinaryIO

from django.contrib.staticfiles import views as staticfiles_views
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage
from django.http import FileResponse, HttpRequest, HttpResponse

PLOTLY_STATIC_PATH = "vendor/plotly.min.js"


def plotly_bundle_path() -> Path:
    """Where the installed plotly package keeps its minified plotly.js bundle."""
    spec = find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the plotly package is not installed (it is pinned in requirements.txt)")
    return Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"


class VendorFinder(BaseFinder):
    """Finds `vendor/plotly.min.js` inside the installed plotly package."""

    def check(self, **kwargs: object) -> list:
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: object) -> str | list[str]:
        if path != PLOTLY_STATIC_PATH:
            return []  # Django's finders.find takes any non-list result, even "", as a match
        bundle = str(plotly_bundle_path())
        return [bundle] if find_all else bundle

    def list(self, ignore_patterns: list[str] | None) -> Iterator[tuple[str, FileSystemStorage]]:
        bundle = plotly_bundle_path()
        storage = FileSystemStorage(location=bundle.parent)
        storage.prefix = "vendor"  # collectstatic places the file under this folder
        yield bundle.name, storage


def serve_static(request: HttpRequest, path: str) -> HttpResponse:
    """One static file found by the staticfiles finders, with conditional GET and a modest cache lifetime."""
    response = staticfiles_views.serve(request, path, insecure=True)
    response.headers.setdefault("Cache-Control", "public, max-age=3600")
    if isinstance(response, FileResponse) and response.file_to_stream is not None:
        # under ASGI a synchronous file iterator is drained whole before sending; stream it instead
        response.streaming_content = _read_chunks(response.file_to_stream, response.block_size)
    return response


async def _read_chunks(file: BinaryIO, size: int) -> AsyncIterator[bytes]:
    while chunk := await asyncio.to_thread(file.read, size):
        yield chunk
