"""The control stream's consumer side against a real Redis: group, delivery counts, claims, acks."""

from __future__ import annotations

import time

import pytest
import redis
from redis.client import Pipeline

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.backends.scripts import scripts
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.state.control import CONTROL_GROUP, ControlConsumer, ControlQueue


@pytest.fixture
def keys(redis_settings: Settings) -> Keys:
    return keys_from_settings(redis_settings)


def submit(client: redis.Redis, keys: Keys, *uuids: str) -> None:
    queue = ControlQueue(client, keys)

    def build() -> Pipeline:
        pipe = client.pipeline(transaction=True)
        for uuid in uuids:
            queue.submit(pipe, "stats", {"uuid": uuid, "appid": "testapp"}, f"t/0/{uuid}")
        return pipe

    scripts(client).execute(build)


def test_group_creation_is_idempotent_and_reads_what_was_appended_before(redis_client: redis.Redis, keys: Keys) -> None:
    submit(redis_client, keys, "early")
    first, second = ControlConsumer(redis_client, keys, "a"), ControlConsumer(redis_client, keys, "b")
    first.ensure_group()
    second.ensure_group()
    (entry,) = first.read(10, 0)
    assert (entry.kind, entry.request(), entry.deliveries) == ("stats", {"uuid": "early", "appid": "testapp"}, 1)
    assert second.read(10, 0) == []  # delivered once per group


def test_read_blocks_at_most_block_ms_on_an_idle_stream(redis_client: redis.Redis, keys: Keys) -> None:
    consumer = ControlConsumer(redis_client, keys, "a")
    consumer.ensure_group()
    started = time.monotonic()
    assert consumer.read(10, 200) == []
    assert 0.15 <= time.monotonic() - started < 2.0


def test_renew_keeps_the_count_reclaim_and_claims_add_a_delivery(redis_client: redis.Redis, keys: Keys) -> None:
    submit(redis_client, keys, "x")
    mine, other = ControlConsumer(redis_client, keys, "mine"), ControlConsumer(redis_client, keys, "other")
    mine.ensure_group()
    (entry,) = mine.read(1, 0)
    mine.renew([entry.id])
    assert other.claim_stale(60_000, 10) == []  # renewed: not idle
    (again,) = mine.reclaim([entry.id])
    assert again.deliveries == 2 and mine.owned([entry.id]) == {entry.id}
    time.sleep(0.05)
    (taken,) = other.claim_stale(10, 10)
    assert taken.id == entry.id and taken.deliveries == 3
    assert mine.owned([entry.id]) == set() and other.owned([entry.id]) == {entry.id}
    other.ack([entry.id])
    assert redis_client.xlen(keys.control_stream()) == 0
    assert other.owned([entry.id]) == set()


def test_a_vanished_group_is_recreated(redis_client: redis.Redis, keys: Keys) -> None:
    consumer = ControlConsumer(redis_client, keys, "a")
    consumer.ensure_group()
    redis_client.delete(keys.control_stream())
    assert consumer.read(10, 0) == []
    submit(redis_client, keys, "later")
    assert [e.request()["uuid"] for e in consumer.read(10, 0)] == ["later"]


def test_a_request_that_is_not_a_json_object_raises_value_error(redis_client: redis.Redis, keys: Keys) -> None:
    redis_client.xadd(keys.control_stream(), {"kind": "stats", "request": "[1]"})
    consumer = ControlConsumer(redis_client, keys, "a")
    consumer.ensure_group()
    (entry,) = consumer.read(1, 0)
    with pytest.raises(ValueError, match="not a JSON object"):
        entry.request()


def test_an_entry_deleted_while_pending_is_not_claimed_and_leaves_the_pending_list(
    redis_client: redis.Redis, keys: Keys
) -> None:
    """Redis 7 drops a deleted entry from the pending list in XAUTOCLAIM; Redis 6.2 hands it out as
    a nil and keeps it pending: either way a claim returns only live entries, and nothing stays
    pending for the deleted one."""
    submit(redis_client, keys, "gone", "kept")
    dead, other = ControlConsumer(redis_client, keys, "dead"), ControlConsumer(redis_client, keys, "other")
    dead.ensure_group()
    gone, kept = dead.read(2, 0)
    redis_client.xdel(keys.control_stream(), gone.id)
    time.sleep(0.05)
    (taken,) = other.claim_stale(10, 10)
    assert taken.id == kept.id and taken.kind == "stats"
    pending = redis_client.xpending_range(keys.control_stream(), CONTROL_GROUP, "-", "+", 10)
    assert [p["message_id"].decode() for p in pending] == [kept.id]
