"""pytest fixtures for exitpool's loopback testbed (registered through the ``pytest11`` entry
point, so installing exitpool is enough).

``exitpool_testbed``
    A :class:`exitpool.testbed.Testbed` running on a background thread with its own event loop,
    for sync tests (requests, httpx, a sync ``Pool``). Function-scoped: a fresh world per test.

``exitpool_testbed_async``
    The same world on the test's own event loop, for ``async def`` tests with pytest-asyncio
    (strict mode included)::

        @pytest.mark.asyncio
        async def test_my_scraper(exitpool_testbed_async):
            tb = exitpool_testbed_async
            ...

    Without pytest-asyncio, use ``async with Testbed() as tb:`` inside the test instead.

Both read their options from the ``exitpool_testbed`` marker, passed to ``Testbed``::

    @pytest.mark.exitpool_testbed(n_exits=3, rate=5, ban_after=3)
    def test_backoff(exitpool_testbed): ...

Needs aiohttp (``pip install 'exitpool[aiohttp]'``); the fixtures import it only when used.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator

import pytest

__all__ = ["exitpool_testbed", "exitpool_testbed_async"]

_MARKER = "exitpool_testbed"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{_MARKER}(**options): options for the exitpool_testbed / exitpool_testbed_async fixtures "
        "(keyword arguments of exitpool.testbed.Testbed, e.g. n_exits=3, rate=5)",
    )


def _options(request: pytest.FixtureRequest) -> Dict[str, Any]:
    options: Dict[str, Any] = {}
    # Closest marker last, so that a function's marker wins over its class's and module's.
    for marker in reversed(list(request.node.iter_markers(_MARKER))):
        if marker.args:
            raise TypeError(f"@pytest.mark.{_MARKER} takes keyword arguments only")
        options.update(marker.kwargs)
    return options


@pytest.fixture
def exitpool_testbed(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A loopback testbed on a background thread (sync tests); closed after the test."""
    from .testbed import Testbed

    with Testbed(**_options(request)) as tb:
        yield tb


# A flag rather than the module set to None, so that the module keeps its own type.
try:
    import pytest_asyncio as _pytest_asyncio
except ImportError:  # pragma: no cover - depends on the user's environment
    _HAVE_PYTEST_ASYNCIO = False
else:
    _HAVE_PYTEST_ASYNCIO = True

if _HAVE_PYTEST_ASYNCIO:

    @_pytest_asyncio.fixture
    async def exitpool_testbed_async(request: pytest.FixtureRequest) -> Any:
        """A loopback testbed on the test's event loop (async tests); closed after the test."""
        from .testbed import Testbed

        async with Testbed(**_options(request)) as tb:
            yield tb

else:  # pragma: no cover - depends on the user's environment

    @pytest.fixture
    def exitpool_testbed_async() -> Any:
        pytest.skip("exitpool_testbed_async needs pytest-asyncio; or use `async with Testbed()` in the test")
