"""A retry whose move back to the frontier fails on a Redis error (a node failing over) is tried
again, its lease renewed meanwhile, instead of being left to its lease's expiry (docs/contract.md
§18.3; crawler/leases.py): the page would otherwise wait LEASE_TIMEOUT before anyone fetched it
again, and its crawl's ``complete`` with it.

Redis refuses for real: the table's client logs in as a user of its own whose ``EVALSHA`` an
``ACL SETUSER`` takes away, then gives back (on one Redis; a cluster's ACLs are per node).
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from crawlhive.crawler.leases import LeaseContext, LeaseTable
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings, write_pipeline
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import Frontier, FrontierLeaser, FrontierRequest, ThrottleConfig

pytestmark = pytest.mark.skipif(
    os.environ.get("CRAWLHIVE_TEST_REDIS") == "cluster", reason="ACL SETUSER reaches one node of a cluster"
)

FAST = ThrottleConfig(hits=1000, window_s=1.0, moderated=False, type_enabled=True, egress_id=None)
LEASE_S = 30.0


class Refusing:
    """A Redis user of its own whose script calls can be refused and allowed again."""

    def __init__(self, admin: redis.Redis) -> None:
        self.admin = admin
        self.name = f"lease-test-{secrets.token_hex(4)}"
        self.password = secrets.token_hex(8)
        self.allow()

    def client(self) -> redis.Redis:
        kwargs = self.admin.connection_pool.connection_kwargs
        return redis.Redis(host=kwargs["host"], port=kwargs["port"], username=self.name, password=self.password)

    def allow(self) -> None:
        self.admin.acl_setuser(
            self.name, enabled=True, passwords=[f"+{self.password}"], keys=["*"], channels=["*"], commands=["+@all"]
        )

    def refuse(self) -> None:
        self.admin.acl_setuser(self.name, commands=["-evalsha", "-eval"])

    def close(self) -> None:
        self.admin.acl_deluser(self.name)


@pytest.fixture
def refusing(redis_client: redis.Redis) -> Iterator[Refusing]:
    user = Refusing(redis_client)
    yield user
    user.close()


def _table(redis_settings: Settings, client: redis.Redis) -> tuple[LeaseTable, FrontierLeaser, Keys]:
    keys = keys_from_settings(redis_settings)
    worker = FrontierLeaser(client, keys, lease_s=LEASE_S, record_ttl_s=3600, throttle=FAST)
    frontier = Frontier.from_settings(client, redis_settings)
    return LeaseTable(client, keys, worker, frontier, max_hold_s=600, on_crawled=lambda: None), worker, keys


def _leased(client: redis.Redis, redis_settings: Settings, worker: FrontierLeaser) -> LeaseContext:
    request = FrontierRequest(url="http://example.com/a", appid="app", crawlid="c1", request_id="r1")
    pipe = write_pipeline(client)
    Frontier.from_settings(client, redis_settings).push([request], pipe)
    pipe.execute()
    outcome = worker.pop("link")
    assert outcome.lease is not None
    return LeaseContext(outcome.lease)


def _fire(table: LeaseTable, member: bytes) -> None:
    """Run the timer the table set for *member* now (no reactor runs in this test)."""
    call: Any = table._parked.pop(member)
    func, args, kw = call.func, call.args, call.kw  # cancel() forgets them
    call.cancel()
    func(*args, **kw)


def test_a_retry_whose_park_and_requeue_fail_on_redis_is_requeued_once_redis_answers(
    redis_settings: Settings, redis_client: redis.Redis, refusing: Refusing, caplog: pytest.LogCaptureFixture
) -> None:
    client = refusing.client()
    table, worker, keys = _table(redis_settings, client)
    context = _leased(client, redis_settings, worker)
    member = context.lease.member
    leases = keys.leases("link", keys.shard_of("example.com"))
    queue = keys.crawl_queue("link", "app", "c1", "example.com")
    table.add(context)
    try:
        refusing.refuse()
        with caplog.at_level(logging.WARNING, logger="crawlhive.crawler.leases"):
            table.retry(context, wait_s=5)  # the park is refused
        assert context.done and member in table._held and member in table._parked
        assert "could not park http://example.com/a" in caplog.text and "requeueing it from here" in caplog.text
        assert "Traceback" not in caplog.text
        assert redis_client.zscore(leases, member) is not None  # still leased: not left to expire

        refusing.allow()
        before = redis_client.zscore(leases, member)
        table.renew_all()  # the lease of a refused park is renewed like any in flight
        renewed = redis_client.zscore(leases, member)
        assert renewed is not None and before is not None and renewed >= before

        refusing.refuse()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="crawlhive.crawler.leases"):
            _fire(table, member)  # the back-off is over: the requeue is refused, and tried again later
        assert "could not requeue http://example.com/a" in caplog.text and "trying again in 0.5s" in caplog.text
        assert member in table._held and member in table._parked
        assert redis_client.zcard(queue) == 0

        refusing.allow()
        _fire(table, member)  # Redis answers: back in the frontier as a retry, the lease ended
        assert redis_client.zscore(leases, member) is None
        assert redis_client.zcard(queue) == 1
        assert not table._held and not table._parked
        again = worker.pop("link").lease
        assert again is not None and again.request.url == "http://example.com/a" and again.request.retry_times == 1
    finally:
        refusing.allow()
        table.close()
        client.close()


def test_a_requeue_still_refused_after_lease_timeout_is_left_to_the_reaper_in_one_line(
    redis_settings: Settings, redis_client: redis.Redis, refusing: Refusing, caplog: pytest.LogCaptureFixture
) -> None:
    client = refusing.client()
    table, worker, keys = _table(redis_settings, client)
    context = _leased(client, redis_settings, worker)
    member = context.lease.member
    table.add(context)
    try:
        refusing.refuse()
        table.retry(context, wait_s=5)
        call: Any = table._parked.pop(member)
        again = call.args[1]
        call.cancel()
        with caplog.at_level(logging.WARNING, logger="crawlhive.crawler.leases"):
            table._due(context, again, first_failure=1.0)  # failing since long ago
        assert "its lease will be reclaimed" in caplog.text and "Traceback" not in caplog.text
        assert not table._held and not table._parked  # no longer renewed: the reaper takes it
    finally:
        refusing.allow()
        table.close()
        client.close()
