"""``-p asyncio_auto``: runs harel's ``async def`` tests, as pytest-asyncio would for harel.

harel's suite leaves its coroutine tests to pytest-asyncio in auto mode (its pyproject:
``asyncio_mode = "auto"``), a dev dependency of harel's that this project does not install;
without it pytest fails every such test. This stands in for it: each coroutine test runs on an
event loop of its own, as pytest-asyncio's default (function) loop scope does. None of the
upstream tests run here uses an async fixture, which this does not provide.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    # harel's pyproject sets it; known, it is no "unknown config option" warning.
    parser.addini("asyncio_mode", "pytest-asyncio's mode (auto: what this plugin does)")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    test = pyfuncitem.obj
    if not inspect.iscoroutinefunction(test):
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in inspect.signature(test).parameters}
    asyncio.run(test(**arguments))
    return True
