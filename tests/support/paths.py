"""Where things are, for tests that run a file of the checkout (a script, a Node client, a
helper started as its own process) rather than import it."""

import os

SUPPORT = os.path.dirname(os.path.abspath(__file__))  # tests/support: the helpers
TESTS = os.path.dirname(SUPPORT)
ROOT = os.path.dirname(TESTS)  # the checkout
PORTABLE_TESTS = os.path.join(TESTS, "portable")  # the in-process suite, run under micropython too
NODE_DIR = os.path.join(TESTS, "node")  # the Node clients and their node_modules
