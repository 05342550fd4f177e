# The README's two commands, and the docs. Each installs what it needs into the virtualenv
# .venv the first time (and again when pyproject.toml, setup.py or the C sources change):
#
#   make serve    the broker on port 5672, data in ./hutch-data: hutch alone, no extras
#   make test     the whole test suite (what .ci/run calls): hutch with the test extra,
#                 Node's amqplib, rhea, MQTT.js, Node-RED and MicroPython's WebAssembly port
#                 (tests/node, npm),
#                 Debian's rabbitmq-server, mosquitto, chromium, prometheus, systemd-container
#                 and debootstrap (apt) when missing
#   make check    the inner loop: lint and the in-process tests (no other broker, JVM or Node)
#   make soak     the long runs at full length: the bridge's soaks, 100 faults toward hutch and
#                 toward RabbitMQ (make test runs 20 of each); Modbus devices to Parquet for 10
#                 minutes with the uplink cut for one (make test: 40 s, cut for 10); 20,000
#                 power-cut crash states (make test: 120); ten million mutated frames at each
#                 front door and 100,000 requests at the metrics port and the control socket
#                 (make test: 3,000 and 2,000); 10,000 polls of a device answering wrongly
#   make docs     the documentation site into site/ (Sphinx, warnings are errors)
#   make screenshot   docs/assets/home.png: the built site's home page in headless Chromium

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# One stamp per set of packages, so that `make serve` after `make test` (or before it) installs
# only what is missing: the test extra includes the docs extra, which includes the broker.
SERVE_INSTALLED := $(VENV)/.installed-serve
DOCS_INSTALLED := $(VENV)/.installed-docs
TEST_INSTALLED := $(VENV)/.installed-test
# setup.py and c_accel/: pip install also compiles the C accelerator (docs/install.md)
PACKAGE_FILES := pyproject.toml setup.py c_accel/build.py $(wildcard c_accel/*.c c_accel/*.h)
NODE_INSTALLED := tests/node/node_modules/.installed
# Debian's RabbitMQ, for `hutch bench --start-rabbitmq` and the tests that compare with it;
# Debian's Chromium, for the test that looks at the built docs site: installed when missing.
RABBITMQ_SERVER := /usr/lib/rabbitmq/bin/rabbitmq-server
CHROMIUM := /usr/bin/chromium
# Debian's prometheus, for its promtool: the tests check the metrics endpoint's text with it
PROMTOOL := /usr/bin/promtool
# systemd's systemd-analyze: the tests check the unit hutch install-service writes with it
SYSTEMD_ANALYZE := /usr/bin/systemd-analyze
# systemd-nspawn and debootstrap: the service test boots a real systemd in a Debian tree of its
# own (tests/interop/system/test_systemd.py makes the tree, once, in /var/tmp/hutch-nspawn)
NSPAWN := /usr/bin/systemd-nspawn
DEBOOTSTRAP := /usr/sbin/debootstrap
# Debian's mosquitto and its clients (mosquitto_pub, mosquitto_sub): the MQTT tests compare with it
MOSQUITTO := /usr/sbin/mosquitto
# MicroPython's MQTT clients (micropython-lib's umqtt.simple and umqtt.robust, from PyPI): the
# MQTT tests run them under the micropython command, as a sensor runs them
UMQTT := build/umqtt/umqtt/robust.py
# Debian's socat: the Modbus tests' RS-485 line is a pty pair it makes (tests/interop/devices)
SOCAT := /usr/bin/socat
# Debian's strace: the power-cut tests record the broker's file calls with it
# (tests/support/crash_states.py)
STRACE := /usr/bin/strace
CLANG := /usr/bin/clang
# Debian's faketime (libfaketime): the clock-jump tests run the broker a year in the past and
# move its clock while it runs (tests/interop/system/test_clock_jumps.py)
FAKETIME := /usr/bin/faketime
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_INSTALL := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends

.PHONY: serve test check soak fuzz docs screenshot lint setup clean

serve: $(SERVE_INSTALLED)
	@echo "make serve: hutch is installed in $(BIN)/. To run the hutch command yourself: . $(BIN)/activate"
	@echo "            (or: export PATH=\"$$PWD/$(BIN):\$$PATH\"), then hutch serve --help"
	$(BIN)/hutch serve $(ARGS)

# Where PYTHONDONTWRITEBYTECODE is set (this machine sets it), Python keeps no .pyc of what it
# compiles, and every process the tests start (hundreds of brokers, hutch commands, Spark's
# Python workers) compiled hutch's modules again: half of a broker's start, 75 ms of CPU.
# compileall writes them (Python reads them either way), again only for a changed file.
BYTECODE := $(BIN)/python -m compileall -q -x '(^|/)(\.venv|node_modules|site|build)/' .
# pytest rewrites each test module's asserts as it imports it, and keeps the result only where
# Python may write bytecode: else each of the run's six workers rewrites all of them again,
# 8 s of CPU apiece. Collected once here with writing allowed, they are read by every worker.
TEST_BYTECODE := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest --collect-only -q -o addopts= -p no:cacheprovider >/dev/null

test: $(TEST_INSTALLED) $(NODE_INSTALLED) $(RABBITMQ_SERVER) $(CHROMIUM) $(PROMTOOL) $(SYSTEMD_ANALYZE) $(NSPAWN) $(DEBOOTSTRAP) $(MOSQUITTO) $(UMQTT) $(SOCAT) $(STRACE) $(FAKETIME) lint
	$(BYTECODE)
	$(TEST_BYTECODE)
	$(BIN)/python -m pytest $(ARGS)

# The tests that need no process but pytest's: the core (also run under micropython by make
# test), the codec, the sensor client's protocol, the C accelerator against its reference
IN_PROCESS_TESTS := tests/portable tests/codec tests/amqp10 tests/mqtt tests/ports tests/client tests/accel

check: lint
	$(BYTECODE)
	$(BIN)/python -m pytest -q -n 2 $(IN_PROCESS_TESTS) $(ARGS)

soak: $(TEST_INSTALLED) $(RABBITMQ_SERVER) $(SOCAT) $(STRACE)
	HUTCH_SOAK_FAULTS=20 $(BIN)/python -m pytest -n 2 tests/interop/bridge/test_bridge_soak.py $(ARGS)
	HUTCH_CLUSTER_ROUNDS=10 $(BIN)/python -m pytest -n 1 tests/interop/bridge/test_bridge_cluster.py $(ARGS)
	HUTCH_MODBUS_SECONDS=600 HUTCH_MODBUS_CUT=60 $(BIN)/python -m pytest -n 1 tests/interop/devices/test_modbus_to_parquet.py $(ARGS)
	HUTCH_CRASH_STATES=20000 $(BIN)/python -m pytest -n 1 tests/interop/system/test_power_cut.py $(ARGS)
	HUTCH_FUZZ_FRAMES=10000000 HUTCH_FUZZ_REQUESTS=100000 HUTCH_FUZZ_PLAYERS=8 $(BIN)/python -m pytest -n 1 tests/interop/security/test_mutated_sessions.py $(ARGS)
	HUTCH_FUZZ_POLLS=10000 $(BIN)/python -m pytest -n 1 tests/interop/devices/test_device_answers_mutated.py $(ARGS)

# Every fuzz target under atheris without end, a turn of 300 s each (tests/fuzz/fuzz_all.py:
# ARGS="--seconds 60 --only amqp091-session"); its corpora grow in build/fuzz/
# clang: the C accelerator built with libFuzzer's coverage counters (tests/fuzz/c_coverage.py)
fuzz: $(TEST_INSTALLED) $(CLANG)
	$(BIN)/python tests/fuzz/fuzz_all.py $(ARGS)

docs: $(DOCS_INSTALLED)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs site

screenshot: $(DOCS_INSTALLED) $(CHROMIUM)
	$(BIN)/python docs/screenshot.py docs/assets/home.png

# ruff (lint and format) and the layer rules (import-linter, pyproject.toml): seconds, so first
lint: $(TEST_INSTALLED)
	$(BIN)/ruff check --quiet .
	$(BIN)/ruff format --check --quiet .
	$(BIN)/lint-imports --no-cache

setup: $(TEST_INSTALLED) $(NODE_INSTALLED) $(RABBITMQ_SERVER) $(CHROMIUM) $(PROMTOOL) $(SYSTEMD_ANALYZE) $(NSPAWN) $(DEBOOTSTRAP) $(MOSQUITTO) $(UMQTT) $(SOCAT) $(STRACE) $(FAKETIME)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# pip's editable install reaches the checkout through setuptools' import hook, which every Python
# process of the venv loads at start-up (with pathlib, re and urllib.parse: 15 to 20 ms of CPU
# each, and a test run starts thousands). A link named hutch in site-packages reaches it at no
# cost: the hook's .pth is replaced by it (the C accelerator is built in the checkout either way).
LINK_CHECKOUT = SP=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
	&& rm -f $$SP/__editable__.hutch-*.pth && ln -sfn $(CURDIR) $$SP/hutch

$(SERVE_INSTALLED): $(PACKAGE_FILES) | $(BIN)/python
	@echo "make serve: installing hutch (the broker alone) into $(VENV)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	$(LINK_CHECKOUT)
	touch $@

$(DOCS_INSTALLED): $(PACKAGE_FILES) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[docs]'
	$(LINK_CHECKOUT)
	touch $@ $(SERVE_INSTALLED)

$(TEST_INSTALLED): $(PACKAGE_FILES) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(LINK_CHECKOUT)
	touch $@ $(DOCS_INSTALLED) $(SERVE_INSTALLED)

$(NODE_INSTALLED): tests/node/package.json tests/node/package-lock.json
	npm ci --prefix tests/node --no-audit --no-fund --loglevel=error
	touch $@

$(RABBITMQ_SERVER):
	$(APT_INSTALL) rabbitmq-server || ($(SUDO) apt-get update -q && $(APT_INSTALL) rabbitmq-server)

$(UMQTT): tests/support/fetch_umqtt.py | $(BIN)/python
	$(BIN)/python tests/support/fetch_umqtt.py build/umqtt

$(SOCAT):
	$(APT_INSTALL) socat || ($(SUDO) apt-get update -q && $(APT_INSTALL) socat)

$(STRACE):
	$(APT_INSTALL) strace || ($(SUDO) apt-get update -q && $(APT_INSTALL) strace)

$(CLANG):
	$(APT_INSTALL) clang || ($(SUDO) apt-get update -q && $(APT_INSTALL) clang)

$(FAKETIME):
	$(APT_INSTALL) faketime || ($(SUDO) apt-get update -q && $(APT_INSTALL) faketime)

$(MOSQUITTO):
	$(APT_INSTALL) mosquitto mosquitto-clients || ($(SUDO) apt-get update -q && $(APT_INSTALL) mosquitto mosquitto-clients)

$(CHROMIUM):
	$(APT_INSTALL) chromium || ($(SUDO) apt-get update -q && $(APT_INSTALL) chromium)

$(PROMTOOL):
	$(APT_INSTALL) prometheus || ($(SUDO) apt-get update -q && $(APT_INSTALL) prometheus)

$(SYSTEMD_ANALYZE):
	$(APT_INSTALL) systemd || ($(SUDO) apt-get update -q && $(APT_INSTALL) systemd)

$(NSPAWN):
	$(APT_INSTALL) systemd-container || ($(SUDO) apt-get update -q && $(APT_INSTALL) systemd-container)

$(DEBOOTSTRAP):
	$(APT_INSTALL) debootstrap || ($(SUDO) apt-get update -q && $(APT_INSTALL) debootstrap)

clean:
	rm -rf $(VENV) tests/node/node_modules hutch-data site
