"""The metrics port (`--metrics-port`): Prometheus series scraped every 250 ms while real clients
load the broker, checked by Debian's `promtool check metrics`; at rest the counters equal what
the clients did and the per-queue gauges equal what a passive declare says; the status page,
opened in headless Chromium, shows the same figures; with users configured, only a user tagged
monitoring or administrator may look."""

import json
import os
import subprocess
import threading
import urllib.error
import urllib.request

import pika
from brokers import BIN, RunningBroker, free_port, interrupt, wait_until
from micropython_env import micropython, serve_env
from scrapes import dom_figures, get, promtool, series

from hutch.ports.status_page import PAGE

HUTCH = os.path.join(BIN, "hutch")
ODD_QUEUE = 'we"ird\\queue\nname'  # a label value with every character the format escapes
PUBLISHERS, PER_PUBLISHER, UNROUTABLE, GETS = 4, 500, 50, 200
SCRAPES_UNDER_LOAD = 8


def monitored(tmp_path, *extra):
    port = free_port()
    broker = RunningBroker([HUTCH, "serve", "--metrics-port", str(port), *extra], tmp_path).start()
    broker.metrics_url = "http://127.0.0.1:%d" % port
    wait_until(lambda: "serving metrics" in broker.log(), what="the metrics port")
    return broker


class Scraper(threading.Thread):
    """Scrapes /metrics and /metrics/per-object every 250 ms until stopped; keeps what promtool
    said of each scrape that was not clean."""

    def __init__(self, base):
        super().__init__(daemon=True)
        self.base = base
        self.stop = threading.Event()
        self.scrapes = 0
        self.unclean = []

    def run(self):
        while not self.stop.wait(0.25):  # the scrape interval, not a wait for something
            for path in ("/metrics", "/metrics/per-object"):
                _status, _type, text = get(self.base + path)
                code, said = promtool(text)
                if code != 0:
                    self.unclean.append(said)
            self.scrapes += 1


def connect(broker):
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port, heartbeat=30))


def publisher(broker, index, scraper, results):
    """Publishes with confirms while the scraper makes its first SCRAPES_UNDER_LOAD scrapes (and
    at least PER_PUBLISHER messages); results[index]: how many."""
    connection = connect(broker)
    channel = connection.channel()
    channel.confirm_delivery()
    n = 0
    while n < PER_PUBLISHER or scraper.scrapes < SCRAPES_UNDER_LOAD:
        channel.basic_publish("", "work", b"%d:%d" % (index, n))
        n += 1
    connection.close()
    results[index] = n


def consumer(broker, got, done):
    connection = connect(broker)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=50)

    def on_message(ch, method, properties, body):
        got.append(body)
        ch.basic_ack(method.delivery_tag)

    channel.basic_consume("work", on_message)
    while not done.is_set():
        connection.process_data_events(time_limit=0.1)
    connection.close()


def test_metrics_under_load_are_clean_and_at_rest_equal_what_the_clients_did(tmp_path):
    broker = monitored(tmp_path)
    try:
        setup = connect(broker)
        channel = setup.channel()
        channel.confirm_delivery()
        for queue in ("work", "gets", ODD_QUEUE):
            channel.queue_declare(queue)
        for n in range(GETS):
            channel.basic_publish("", "gets", b"g%d" % n)
        for _ in range(7):
            channel.basic_publish("", ODD_QUEUE, b"odd")
        scraper = Scraper(broker.metrics_url)
        scraper.start()
        got, done, published = [], threading.Event(), {}
        consumers = [threading.Thread(target=consumer, args=(broker, got, done)) for _ in range(2)]
        publishers = [
            threading.Thread(target=publisher, args=(broker, i, scraper, published)) for i in range(PUBLISHERS)
        ]
        for thread in consumers + publishers:
            thread.start()
        # the status page opened in headless Chromium while the load runs
        during = dom_figures(broker.metrics_url + "/", str(tmp_path / "chromium"))
        assert int(during["connections"]) >= 1 and during["updated"].startswith("updated"), during
        taken, empty = 0, 0
        while taken < GETS:  # a basic.get loop beside them
            method, _props, _body = channel.basic_get("gets", auto_ack=True)
            if method is None:
                empty += 1
            else:
                taken += 1
        assert channel.basic_get("gets", auto_ack=True)[0] is None
        empty += 1
        for _ in range(UNROUTABLE):  # mandatory and unroutable: returned, counted as received and confirmed
            try:
                channel.basic_publish("", "no-such-queue", b"lost", mandatory=True)
            except pika.exceptions.UnroutableError:
                pass
        for thread in publishers:
            thread.join(120)
        work = sum(published.values())
        wait_until(lambda: len(got) == work, timeout=60, what="every message consumed")
        done.set()
        for thread in consumers:
            thread.join(30)
        scraper.stop.set()
        scraper.join(30)
        assert scraper.scrapes >= SCRAPES_UNDER_LOAD and not scraper.unclean, scraper.unclean[:1]

        published_total = work + GETS + 7 + UNROUTABLE
        status, content_type, text = get(broker.metrics_url + "/metrics")
        assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
        assert promtool(text) == (0, "")
        seen = series(text)
        protocol = '{protocol="amqp091"}'
        assert seen[("rabbitmq_global_messages_received_total", protocol)] == published_total
        assert seen[("rabbitmq_global_messages_received_confirm_total", protocol)] == published_total
        assert seen[("rabbitmq_global_messages_confirmed_total", protocol)] == published_total
        assert seen[("rabbitmq_global_messages_routed_total", protocol)] == published_total - UNROUTABLE
        assert seen[("rabbitmq_global_messages_unroutable_returned_total", protocol)] == UNROUTABLE
        assert seen[("rabbitmq_global_messages_unroutable_dropped_total", protocol)] == 0
        manual = seen[("rabbitmq_global_messages_delivered_consume_manual_ack_total", protocol)]
        assert manual == work
        assert seen[("rabbitmq_global_messages_delivered_get_auto_ack_total", protocol)] == GETS
        assert seen[("rabbitmq_global_messages_get_empty_total", protocol)] == empty
        assert seen[("rabbitmq_global_messages_delivered_total", protocol)] == manual + GETS
        acked = '{protocol="amqp091",queue_type="classic"}'
        assert seen[("rabbitmq_global_messages_acknowledged_total", acked)] == work
        assert seen[("rabbitmq_auth_attempts_total", protocol)] == PUBLISHERS + 2 + 1 + 0
        assert seen[("rabbitmq_auth_attempts_failed_total", protocol)] == 0
        assert seen[("rabbitmq_connections", "")] == 1 and seen[("rabbitmq_channels", "")] == 1
        assert seen[("hutch_connections", '{protocol="amqp091"}')] == 1

        # per object: each queue's gauges equal what a passive declare says, now
        _status, _type, per_object = get(broker.metrics_url + "/metrics/per-object")
        assert promtool(per_object) == (0, "")
        seen = series(per_object)
        for queue in ("work", "gets", ODD_QUEUE):
            label = '{vhost="/",queue="%s"}' % queue.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            count = channel.queue_declare(queue, passive=True).method.message_count
            assert seen[("rabbitmq_queue_messages_ready", label)] == count, queue
        assert 'queue="we\\"ird\\\\queue\\nname"' in per_object
        # and what hutch ctl list queues says
        listed = subprocess.run(
            [HUTCH, "ctl", "list", "queues", "name", "messages_ready", "--json", "--data", broker.data],
            capture_output=True,
            text=True,
            timeout=60,
        )
        for row in json.loads(listed.stdout):
            label = '{vhost="/",queue="%s"}' % row["name"].replace("\\", "\\\\").replace('"', '\\"').replace(
                "\n", "\\n"
            )
            assert seen[("rabbitmq_queue_messages_ready", label)] == row["messages_ready"], row
        setup.close()
    finally:
        broker.stop()


def test_the_status_page_shows_the_figures_of_the_metrics(tmp_path):
    broker = monitored(tmp_path)
    try:
        connection = connect(broker)
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("readings")
        for n in range(42):
            channel.basic_publish("", "readings", b"r%d" % n)
        channel.basic_get("readings", auto_ack=False)  # one unacked
        status, content_type, page = get(broker.metrics_url + "/")
        assert status == 200 and content_type.startswith("text/html") and len(page.encode()) < 200 * 1024
        assert "http://" not in page and "https://" not in page  # no external asset
        figures = dom_figures(broker.metrics_url + "/", str(tmp_path / "chromium"))
        seen = series(get(broker.metrics_url + "/metrics")[2])
        protocol = '{protocol="amqp091"}'
        assert int(figures["received"]) == seen[("rabbitmq_global_messages_received_total", protocol)] == 42
        assert int(figures["confirmed"]) == seen[("rabbitmq_global_messages_confirmed_total", protocol)]
        assert int(figures["connections"]) == seen[("rabbitmq_connections", "")] == 1
        assert int(figures["messages_ready"]) == seen[("rabbitmq_queue_messages_ready", "")] == 41
        assert int(figures["messages_unacked"]) == seen[("rabbitmq_queue_messages_unacked", "")] == 1
        assert figures["queues.readings.messages"] == "41" and figures["queues.readings.unacked"] == "1"
        users = [text for key, text in figures.items() if key.startswith("connections.") and key.endswith(".user")]
        assert users == ["guest"], figures
        connection.close()
    finally:
        broker.stop()


def test_with_users_only_monitoring_users_may_look(tmp_path):
    hashes = {}
    for user, password in (("watcher", "w-pw"), ("app", "a-pw")):
        done = subprocess.run([HUTCH, "passwd", "--password", password], capture_output=True, text=True, timeout=30)
        hashes[user] = done.stdout.strip()
    config = tmp_path / "hutch.toml"
    config.write_text(
        '[users.watcher]\npassword_hash = "%s"\ntags = ["monitoring"]\n'
        '[users.app]\npassword_hash = "%s"\n' % (hashes["watcher"], hashes["app"])
    )
    broker = monitored(tmp_path, "--config", str(config))
    try:
        for auth, expected in ((None, 401), (("app", "a-pw"), 401), (("watcher", "wrong"), 401)):
            try:
                get(broker.metrics_url + "/metrics", auth)
                raise AssertionError("%r was let in" % (auth,))
            except urllib.error.HTTPError as e:
                assert e.code == expected and e.headers.get("WWW-Authenticate") == 'Basic realm="hutch"'
        status, _type, text = get(broker.metrics_url + "/metrics", ("watcher", "w-pw"))
        assert status == 200 and "rabbitmq_connections 0" in text
    finally:
        broker.stop()


def test_the_status_page_opened_with_credentials_in_its_url(tmp_path):
    """http://user:password@host:port/ as a user types it: the page logs in and draws (a browser
    refuses to fetch a URL with credentials, so the page fetches its origin's), with the gateway's
    name, the node's, the version and uptime, and each queue's rates."""
    from hutch.core.broker import VERSION

    done = subprocess.run([HUTCH, "passwd", "--password", "w-pw"], capture_output=True, text=True, timeout=30)
    config = tmp_path / "hutch.toml"
    config.write_text(
        '[server]\nname = "greenhouse-gw"\n[users.watcher]\npassword_hash = "%s"\ntags = ["monitoring"]\n'
        % done.stdout.strip()
    )
    broker = monitored(tmp_path, "--config", str(config))
    try:
        url = broker.metrics_url.replace("http://", "http://watcher:w-pw@") + "/"
        figures = dom_figures(url, str(tmp_path / "chromium"))
        assert "broker not answering" not in figures["updated"], figures
        assert figures["updated"].startswith("updated ") and figures["connections"] == "0", figures
        assert figures["uptime"] in ("up 0 s", "up 1 s", "up 2 s", "up 3 s", "up 4 s", "up 5 s"), figures
        assert figures["node"] == "hutch %s on %s" % (VERSION, os.uname().nodename), figures
        assert figures["gateway"] == "greenhouse-gw", figures  # its [server] name, the page's heading
        for rate in ("published", "delivered"):
            assert figures["rate." + rate] == "0", figures
    finally:
        broker.stop()


def test_the_status_page_shows_rates_below_one_a_second():
    """A sensor's 0.3 msg/s is 0.30 on the page, not 0: the page's own rate(), run in Node."""
    script = PAGE.decode().split("<script>")[1].split("function draw")[0]
    script += "console.log(JSON.stringify([0, 0.3, 0.05, 2.345, 12.34, 99.96, 150.4, 4321.6].map(rate)));"
    done = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["0", "0.30", "0.05", "2.3", "12.3", "100", "150", "4322"]


def test_a_metrics_port_that_cannot_be_had_is_one_line(tmp_path):
    config = tmp_path / "hutch.toml"
    config.write_text('[metrics]\nport = "9419"\n')
    done = subprocess.run([HUTCH, "serve", "--config", str(config)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "[metrics] port must be a number from 0 to 65535, not '9419'" in done.stderr
    first = monitored(tmp_path / "first" if (tmp_path / "first").mkdir() is None else None)
    try:
        port = first.metrics_url.rsplit(":", 1)[1]
        second = subprocess.run(
            [HUTCH, "serve", "--port", str(free_port()), "--metrics-port", port, "--data", str(tmp_path / "d2")],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert second.returncode == 1 and "cannot listen on 127.0.0.1:%s" % port in second.stderr, second.stderr
    finally:
        first.stop()


def test_a_micropython_broker_serves_its_heap(tmp_path):
    """The same endpoint on MicroPython (its asyncio streams), with the board's heap figures; the
    config as JSON, as a board reads it."""
    port = free_port()
    config = tmp_path / "hutch.json"
    config.write_text('{"metrics": {"port": %d}}' % port)
    board = RunningBroker(
        [micropython(), "-m", "hutch.server.serve", "--config", str(config)], tmp_path, env=serve_env(tmp_path)
    ).start()
    try:
        wait_until(lambda: "serving metrics" in board.log(), what="the metrics port")
        _status, _type, text = get("http://127.0.0.1:%d/metrics" % port)
        assert promtool(text) == (0, "")
        seen = series(text)
        assert seen[("hutch_heap_free_bytes", "")] > 0 and seen[("hutch_heap_used_bytes", "")] > 0
        assert seen[("rabbitmq_connections", "")] == 0
    finally:
        assert interrupt(board) == 0
        board.stop()
