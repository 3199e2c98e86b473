"""MemoryStore against the shared StateStore contract."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.store_contract import StoreContract
from tickwheel.streams.store import MemoryStore, StateStore


class TestMemoryStore(StoreContract):
    """The in-memory store passes the whole contract, with exact counts."""

    @pytest.fixture
    def store(self) -> Iterator[StateStore]:
        store = MemoryStore()
        yield store
        store.close()
