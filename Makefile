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

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
