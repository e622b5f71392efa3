"""tenacity's ``AsyncRetrying`` for one call in one coroutine, holding no ``threading.local``.

tenacity keeps a retrying object's state in a ``threading.local``, and an object iterated with
``async for`` refers to itself through its attempt's state, so each call's object is left to
the garbage collector with its thread-local. On CPython before 3.11.9, collecting a
thread-local while another thread lists every thread's frames (Dask's worker profiler does,
every 10 ms while a task runs) deadlocks the process (CPython gh-106883, dask/distributed#8616):
a Dask worker running agent runs froze with every thread waiting for the GIL. Each object here
serves one call in one coroutine, so a plain namespace holds that state instead."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tenacity import AsyncRetrying


class Retrying(AsyncRetrying):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.__dict__["_local"] = SimpleNamespace()

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.__dict__["_local"] = SimpleNamespace()
