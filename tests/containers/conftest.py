"""The container tier (docs/contract.md §22.2): a Docker engine, the images, the compose deployment.

Run by `make test-containers` (the last step of `make test`, so CI runs it). On a machine without a
Docker engine the fixtures start one (Debian's docker.io, installed when root has apt-get), without
Docker's bridge network; when none can be had the tier FAILS, it never skips (docker/README.md).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.docker import Engine, built_images


@pytest.fixture(scope="session")
def engine() -> Engine:
    return Engine.ensure()


@pytest.fixture(scope="session")
def images(engine: Engine) -> Iterator[str]:
    """Both crawlhive images and the stand-ins; yields the base image they were built on."""
    yield built_images(engine)
