"""``Frontier.push`` of a batch leaves Redis exactly as pushing its requests one by one would."""

from __future__ import annotations

import redis

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.frontier import Frontier, FrontierRequest


def _state(client: redis.Redis, prefix: str) -> dict[bytes, object]:
    """Every key under *prefix* (prefix stripped) with its value; crawl records without the clock."""
    state: dict[bytes, object] = {}
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        kind = client.type(key)
        if kind == b"hash":
            value: object = {k: v for k, v in client.hgetall(key).items() if k != b"last_activity"}
        elif kind == b"zset":
            value = client.zrange(key, 0, -1, withscores=True)
        elif kind == b"set":
            value = sorted(client.smembers(key))
        else:
            value = client.get(key)
        state[key[len(prefix) :]] = (value, client.ttl(key) > 0)
    return state


def test_a_batch_push_equals_one_push_per_request(redis_client: redis.Redis, redis_settings: Settings) -> None:
    base = redis_settings["REDIS_KEY_PREFIX"]
    requests = [
        FrontierRequest(url="http://a.example.com/1", appid="app", crawlid="c1", priority=5, request_id="r1"),
        FrontierRequest(url="http://b.example.com/1", appid="app", crawlid="c1", priority=90, request_id="r2"),
        FrontierRequest(
            url="http://a.example.com/2", appid="app", crawlid="c2", priority=1, request_id="r3", expires=5
        ),
        FrontierRequest(url="http://a.example.com/3", appid="app", crawlid="c2", priority=50, request_id="r4"),
        FrontierRequest(url="http://a.example.com/1", appid="app", crawlid="c1", priority=5, request_id="r1"),  # dup
        FrontierRequest(url="http://[::1]:8080/x", appid="other", crawlid="c1", spiderid="wandering", request_id="r5"),
        FrontierRequest(
            url="http://a.example.com/4", appid="app", crawlid="c2", priority=70, request_id="r6", expires=9
        ),
        FrontierRequest(url="http://a.example.com/5", appid="app", crawlid="c2", priority=70, request_id="r7"),
    ]
    batch = Frontier(redis_client, Keys(f"{base}batch"), record_ttl_s=3600)
    single = Frontier(redis_client, Keys(f"{base}single"), record_ttl_s=3600)
    pipe = redis_client.pipeline(transaction=True)
    batch.push(requests, pipe)
    pipe.execute()
    for request in requests:
        pipe = redis_client.pipeline(transaction=True)
        single.push([request], pipe)
        pipe.execute()
    pushed_batch, pushed_single = _state(redis_client, f"{base}batch"), _state(redis_client, f"{base}single")
    assert pushed_batch == pushed_single
    assert len(pushed_batch) > 10
    # pushing the same batch again (a redelivered Kafka batch) changes nothing but the sequence
    pipe = redis_client.pipeline(transaction=True)
    batch.push(requests, pipe)
    pipe.execute()
    again = _state(redis_client, f"{base}batch")
    seq = b":" + Keys("x").queue_sequence().split(":", 1)[1].encode()
    assert {k: v for k, v in again.items() if k != seq} == {k: v for k, v in pushed_batch.items() if k != seq}


def test_the_plan_of_a_push_is_computed_without_redis() -> None:
    """Frontier.push = plan_push (pure: the grouped writes) + the writes of the plan."""
    from crawlhive.utils.frontier.model import encode_score
    from crawlhive.utils.frontier.writer import plan_push

    keys = Keys("p", shards=1)
    requests = [
        FrontierRequest(url="http://a.example.com/1", appid="app", crawlid="c1", priority=5, request_id="r1"),
        FrontierRequest(url="http://a.example.com/2", appid="app", crawlid="c1", priority=90, request_id="r2"),
        FrontierRequest(url="http://b.example.com/", appid="app", crawlid="c1", expires=99, max_pages=7),
    ]
    next_seq = {0: 10}
    plan = plan_push(keys, requests, next_seq)
    assert next_seq == {0: 13}  # one arrival sequence per request
    queue = keys.crawl_queue("link", "app", "c1", "example.com", False)
    assert list(plan.queues) == [queue]  # both domains bucket to example.com
    assert sorted(plan.queues[queue].values()) == sorted(
        [encode_score(5, 10), encode_score(90, 11), encode_score(1, 12)]
    )
    best = plan.best[("link", False, "example.com")][keys.crawl_member("app", "c1")]
    assert best == min(plan.queues[queue].values())
    assert plan.crawls == {("link", "app", "c1"): 99}
    assert plan.budgets == {("link", "app", "c1"): 7}
    assert plan.spider_domains == {("link", False, 0): {"example.com"}}
