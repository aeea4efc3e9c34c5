"""The declared type of every setting, so that ``settings.NAME`` reads are typed (mypy checks them).

Generated from :mod:`crawlhive.utils.config.defaults`; do not edit. After adding or changing a setting there:
``python -m crawlhive.utils.config.settings`` (tests/unit/test_settings.py checks this file is current).
At run time :class:`~crawlhive.utils.config.settings.Settings` reads the values."""

# ruff: noqa: E501

from typing import Any


class SettingTypes:
    """Each setting, declared as an attribute of :class:`~crawlhive.utils.config.settings.Settings`."""

    REDIS_URL: str
    REDIS_KEY_PREFIX: str
    FRONTIER_SHARDS: int
    REDIS_WAIT_REPLICAS: int
    REDIS_WAIT_TIMEOUT: int
    KAFKA_BOOTSTRAP_SERVERS: list[str]
    KAFKA_TOPIC_PREFIX: str
    KAFKA_GROUP: str
    KAFKA_SECURITY_PROTOCOL: str
    KAFKA_SASL_MECHANISM: str | None
    KAFKA_SASL_USERNAME: str | None
    KAFKA_SASL_PASSWORD: str | None
    KAFKA_SSL_CAFILE: str | None
    KAFKA_APPID_TOPICS: bool
    KAFKA_BASE_64_ENCODE: bool
    KAFKA_PRODUCER_MAX_REQUEST_SIZE: int
    KAFKA_FEED_TIMEOUT: float
    KAFKA_TOPIC_PARTITIONS: int
    KAFKA_TOPIC_REPLICATION: int
    KAFKA_CONSUMER_POLL_TIMEOUT_MS: int
    KAFKA_CONSUMER_FETCH_MAX_WAIT_MS: int
    KAFKA_MAX_POLL_INTERVAL_MS: int
    KAFKA_SESSION_TIMEOUT_MS: int
    KAFKA_CONSUMER_MAX_POLL_RECORDS: int
    BLOB_STORE_URL: str
    BLOB_TTL: float
    BLOB_STORE_MAX_BYTES: int
    SCHEMA_PRIORITY_MIN: int
    SCHEMA_PRIORITY_MAX: int
    SCHEMA_MAXDEPTH_MAX: int
    SCHEMA_DOMAIN_MAX_PAGES_MAX: int
    SCHEMA_MAX_PAGES_MAX: int
    SCHEMA_URL_MAX_LENGTH: int
    SCHEMA_ARRAY_MAX_ITEMS: int
    SCHEMA_REGEX_MAX_REPEAT: int
    SCHEMA_REGEX_MAX_PROGRAM: int
    SCHEMA_REGEX_MAX_TOTAL_PROGRAM: int
    SCHEMA_ATTRS_MAX_BYTES: int
    SCHEMA_HITS_MAX: int
    SCHEMA_WINDOW_MAX: int
    SCHEMA_ALLOWED_METHODS: list[str]
    PLUGINS: dict[str, Any]
    KAFKA_MONITOR_PLUGINS: dict[str, Any]
    REDIS_MONITOR_PLUGINS: dict[str, Any]
    REDIS_MONITOR_BLOCK_MS: int
    REDIS_MONITOR_BATCH: int
    REDIS_MONITOR_CLAIM_IDLE_S: float
    REDIS_MONITOR_MAX_ATTEMPTS: int
    REDIS_MONITOR_RETRY_S: float
    REDIS_MONITOR_TICK_S: float
    REDIS_MONITOR_EXPIRE_ENABLED: bool
    REDIS_MONITOR_COMPLETE_ENABLED: bool
    REDIS_MONITOR_REAPER_ENABLED: bool
    QUEUE_HITS: int
    QUEUE_WINDOW: float
    QUEUE_MODERATED: bool
    QUEUE_WINDOW_MARGIN: float
    SCHEDULER_TYPE_ENABLED: bool
    SCHEDULER_IP_ENABLED: bool
    CRAWLER_EGRESS_ID: str | None
    LEASE_TIMEOUT: float
    DUPEFILTER_TIMEOUT: float
    DUPEFILTER_BLOOM_ABOVE: int
    FRONTIER_TAIL_URL: str
    FRONTIER_HEAD_SIZE: int
    FRONTIER_SEGMENT_SIZE: int
    FRONTIER_HOT_DOMAINS: int
    FRONTIER_TAIL_BACKLOG_MAX: int
    GLOBAL_PAGE_PER_DOMAIN_LIMIT: int | None
    CRAWL_MAX_PAGES_DEFAULT: int | None
    LINK_MAX_URL_LENGTH: int
    LINK_MAX_SEGMENT_REPEATS: int
    LINK_MAX_PER_PAGE: int
    CRAWL_RECORD_TTL: float
    RECRAWL_MIN_EVERY: int
    RECRAWL_GONE_AFTER: int
    RECRAWL_EMIT_UNCHANGED: bool
    RECRAWL_STATE_BUCKETS: int
    RECRAWL_RELEASE_BATCH: int
    RECRAWL_MAX_PAGES_DEFAULT: int | None
    APPID_MAX_SCHEDULED_PAGES: int | None
    RECRAWL_ENABLED: bool
    RECRAWL_CONFIG_CACHE_S: float
    RETRY_TIMES: int
    RETRY_HTTP_CODES: list[int]
    RETRY_BACKOFF_BASE: float
    RETRY_BACKOFF_MAX: float
    DOWNLOAD_TIMEOUT: float
    DOWNLOAD_MAXSIZE: int
    FETCH: str
    FETCH_PROFILE: str
    FETCH_WALL_STATUSES: list[int]
    FETCH_WALL_PATTERNS: list[str]
    FETCH_SESSION_PROFILES: list[str]
    FETCH_LADDER_TTL: float
    USER_AGENT: str
    CRAWLER_NODE_NAME: str
    CONCURRENT_REQUESTS: int
    ROBOTSTXT_MAX_CRAWL_DELAY: float
    ROBOTSTXT_OBEY: bool
    SPIDER_MODULES: list[str]
    SPIDER_IDS: list[str]
    KAFKA_ENABLED: bool
    RENDER: bool
    RENDER_CONCURRENCY: int
    RENDER_TIMEOUT: float
    RENDER_BROWSER: str
    RENDER_BROWSER_USER: str
    RENDER_ALLOW_NO_SANDBOX: bool
    RENDER_JS_HEAP_MB: int
    RENDER_PROXY_IDLE_TIMEOUT: float
    RENDER_PROXY_MAX_CONNECTIONS: int
    REDIS_START_URLS_KEY: str
    REDIS_ITEMS_KEY: str
    CRAWLER_BLOCKED_NETWORKS: list[str]
    CRAWLER_ALLOWED_NETWORKS: list[str]
    ITEM_REDACT_HEADERS: list[str]
    ITEM_REDACT_HEADER_WORDS: list[str]
    CRAWLER_STATS_FLUSH_S: float
    SCRAPY_SETTINGS: dict[str, Any]
    PROXY_POOLS: dict[str, list[str]]
    PROXY_DOMAIN_POOLS: dict[str, str]
    PROXY_CLIENT_POOLS: list[str]
    PROXY_POOL_DOMAIN_UPDATES: bool
    PROXY_POOLS_FILE: str
    PROXY_POOL_DEFAULT: str
    PROXY_BAN_STATUSES: list[int]
    PROXY_BAN_THRESHOLD: int
    PROXY_SHARED_BANS: bool
    PROXY_COOLDOWN: float
    PROXY_COOLDOWN_MAX: float
    PROXY_MAX_SWITCHES: int
    SESSION_MAX_REQUESTS: int
    SESSION_TTL: float
    AUTOTHROTTLE: bool
    AUTOTHROTTLE_LATENCY: float
    AUTOTHROTTLE_STEP: float
    AUTOTHROTTLE_MIN: float
    CLEANER_GROUP: str
    CLEANER_PLUGINS: dict[str, int | None]
    CLEANER_MASK_PII: bool
    CLEANER_REQUIRED_FIELDS: list[str]
    CLEANER_DEDUPE_TTL: float
    NEAR_DUPLICATES: str
    NEAR_DUPLICATE_DISTANCE: int
    NEAR_DUPLICATE_TTL: float
    NEAR_DUPLICATE_MIN_WORDS: int
    CLEANER_MAX_SECONDS: float
    CLEANER_EXTRACT_PROCESSES: int
    CLEANER_MAX_TEXT_BYTES: int
    CLEANER_MAX_POLL_RECORDS: int
    CLEANER_MAX_POLL_INTERVAL_MS: int
    CLEANER_MARKDOWN: bool
    SINK_URL: str
    SINK_FROM: str
    SINK_GROUP: str
    SINK_MAX_POLL_RECORDS: int
    SINK_MAX_POLL_INTERVAL_MS: int
    SINK_ROLL_BYTES: int
    SINK_MAX_HELD_BYTES: int
    SINK_ROLL_SECONDS: float
    SINK_SKIP_NEAR_DUPLICATES: bool
    STATS_TIMES: list[int]
    STATS_RESPONSE_CODES: list[int]
    STATS_QUEUE_MAX_DOMAINS: int
    METRICS_TOP_DOMAINS: int
    METRICS_NAMES: bool | None
    HEARTBEAT_TIMEOUT: float
    HEARTBEAT_INTERVAL: float
    HEARTBEAT_FILE: str
    REST_HOST: str
    REST_PORT: int
    REST_API_KEY: str
    REST_INSECURE: bool
    REST_ALLOWED_HOSTS: list[str]
    WAIT_FOR_RESPONSE_TIME: float
    POLL_RESULT_TTL: float
    REST_MAX_BODY_BYTES: int
    LOG_LEVEL: str
    LOG_JSON: bool
    LOG_FILE: str | None
    LOG_STOP_SIGNALS: bool
    CRAWLHIVE_HOME: str
