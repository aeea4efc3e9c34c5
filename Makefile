# Two commands for a fresh machine (python3.11+ and make): `make demo` and `make test`.
# Both create the virtualenv in .venv and install everything themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo up test lint format bench clean browser

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt -r requirements-dev.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/crawlhive demo

up: $(STAMP)
	$(BIN)/crawlhive up

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Debian's chromium for the dashboard's browser test (tests/integration/test_rest_dashboard.py):
# Playwright drives this system binary, nothing is downloaded. Without root (or apt) the test skips.
browser:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the dashboard browser test"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq chromium >/dev/null 2>&1 || \
		{ apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || \
		echo "could not install chromium: the dashboard browser test will be skipped"; \
	else \
		echo "chromium is missing and this is not root: the dashboard browser test will be skipped"; \
	fi

test: lint browser
	$(BIN)/pytest

# Benchmarks (never part of `make test`; see bench/README.md). Each prints its figure against its
# target or beside a baseline measured in the same run. The crawl benchmark needs the shared site
# (../shared/bench: generated into /tmp/perfsite, served by a private nginx, which nginx.sh installs
# as root if missing); bench/memory.py runs when it exists.
bench: $(STAMP)
	@echo "machine: $$(nproc) cores, $$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $$(free -h | awk '/^Mem:/{print $$2}') memory"
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/info.py
	$(BIN)/python bench/latency.py
	$(BIN)/python bench/throttle.py
	@if [ -f bench/memory.py ]; then $(BIN)/python bench/memory.py; else echo "bench/memory.py not present: skipped"; fi
	@test -f /tmp/perfsite/www/seeds.txt || $(BIN)/python ../shared/bench/gen_site.py
	../shared/bench/nginx.sh start
	$(BIN)/python bench/crawl.py; status=$$?; ../shared/bench/nginx.sh stop; exit $$status

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
