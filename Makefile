# The two commands of the README. Both set everything up on a fresh machine:
# a virtualenv in .venv with hutch installed (editable) and the test tools,
# Node's amqplib for the interop tests, and Debian's rabbitmq-server (apt) when missing.
#
#   make serve    run the broker on port 5672, data in ./hutch-data
#   make test     run the whole test suite (what .ci/run calls)

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
NODE_INSTALLED := tests/node/node_modules/.installed
# Debian's RabbitMQ, for `hutch bench --start-rabbitmq` and its test: installed when missing.
RABBITMQ_SERVER := /usr/lib/rabbitmq/bin/rabbitmq-server
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_INSTALL := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends

.PHONY: serve test lint setup clean

serve: $(INSTALLED)
	$(BIN)/hutch serve $(ARGS)

test: $(INSTALLED) $(NODE_INSTALLED) $(RABBITMQ_SERVER) lint
	$(BIN)/python -m pytest $(ARGS)

# ruff (lint and format) and the layer rules (import-linter, pyproject.toml): seconds, so first
lint: $(INSTALLED)
	$(BIN)/ruff check --quiet .
	$(BIN)/ruff format --check --quiet .
	$(BIN)/lint-imports --no-cache

setup: $(INSTALLED) $(NODE_INSTALLED) $(RABBITMQ_SERVER)

# setup.py and c_accel/: pip install also compiles the C accelerator (see README)
$(INSTALLED): pyproject.toml setup.py c_accel/build.py c_accel/framing.c c_accel/framing.h c_accel/crc32.c c_accel/crc32.h c_accel/streams.c c_accel/streams.h c_accel/messages.c c_accel/messages.h c_accel/appends.c c_accel/appends.h c_accel/bigendian.h
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

$(NODE_INSTALLED): tests/node/package.json tests/node/package-lock.json
	npm ci --prefix tests/node --no-audit --no-fund --loglevel=error
	touch $@

$(RABBITMQ_SERVER):
	$(APT_INSTALL) rabbitmq-server || ($(SUDO) apt-get update -q && $(APT_INSTALL) rabbitmq-server)

clean:
	rm -rf $(VENV) tests/node/node_modules hutch-data
