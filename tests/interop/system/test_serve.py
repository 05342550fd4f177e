"""`hutch serve` and `hutch passwd` as a user runs them: options, config file, users, shutdown."""

import os
import signal
import socket
import subprocess
import time

import pika
import pika.exceptions
import pytest
from brokers import BIN, RunningBroker, blocked_notices, drain, pump_until, wait_until

HUTCH = os.path.join(BIN, "hutch")


def _hutch(*args, timeout=30):
    return subprocess.run([HUTCH] + list(args), capture_output=True, text=True, timeout=timeout)


def _connect(broker, user="guest", password="guest", **kw):
    params = pika.ConnectionParameters(
        broker.host,
        broker.port,
        credentials=pika.PlainCredentials(user, password),
        connection_attempts=1,
        socket_timeout=5,
        **kw,
    )
    return pika.BlockingConnection(params)


def _config(tmp_path, text):
    path = tmp_path / "hutch.toml"
    path.write_text(text)
    return str(path)


def test_passwd_hash_logs_in_and_guest_is_gone(tmp_path):
    result = _hutch("passwd", "--password", "s3cret")
    assert result.returncode == 0, result.stderr
    stored = result.stdout.strip()
    config = _config(tmp_path, '[users.sensor]\npassword_hash = "%s"\n' % stored)
    broker = RunningBroker([HUTCH, "serve", "--config", config], tmp_path).start()
    try:
        conn = _connect(broker, "sensor", "s3cret")
        conn.channel().queue_declare("from-sensor")
        conn.close()
        with pytest.raises(pika.exceptions.ProbableAuthenticationError) as failure:
            _connect(broker, "guest", "guest")
        assert "403" in str(failure.value) and "ACCESS_REFUSED" in str(failure.value)
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            _connect(broker, "sensor", "wrong")
    finally:
        assert broker.stop() == 0
    log = broker.log()
    # the log says which reason it was (the client is told only 403)
    assert (
        "login refused: user 'guest' - invalid credentials: no such user "
        "(a config with a [users] table has only the users it lists)" in log
    )
    assert "login refused: user 'sensor' - invalid credentials: wrong password" in log
    assert "connection open (user 'sensor'" in log


def test_failed_login_is_delayed(broker):
    started = time.monotonic()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        _connect(broker, "guest", "not-the-password")
    assert time.monotonic() - started >= 0.9  # the broker waits ~1 s before it answers


def test_limits_from_config_reach_the_client(tmp_path):
    config = _config(tmp_path, "[limits]\nframe_max = 8192\nchannel_max = 4\nheartbeat = 7\n")
    broker = RunningBroker([HUTCH, "serve", "--config", config], tmp_path).start()
    try:
        conn = _connect(broker)
        impl = conn._impl
        assert impl.params.frame_max == 8192 and impl.params.channel_max == 4 and impl.params.heartbeat == 7
        for _ in range(4):
            conn.channel()
        with pytest.raises(pika.exceptions.NoFreeChannels):
            conn.channel()  # pika itself stops at the negotiated channel_max
        conn.close()
    finally:
        broker.stop()


@pytest.mark.parametrize(
    "text, message",
    [
        ("[limits]\nframe_max = 100\n", "frame_max must be at least 4096"),
        ("[limits]\nqueues = 5\n", "unknown limit 'queues'"),
        (
            "[limits]\nmax_conections = 5\n",
            "[limits]: unknown limit 'max_conections' (did you mean 'max_connections'?)",
        ),
        ("[server]\nprot = 5672\n", "unknown key 'prot' in [server] (did you mean 'port'?)"),
        ('[users.bob]\npassword = "x"\n', "unknown key 'password' in [users.bob] (did you mean 'password_hash'?)"),
        (
            '[users.bob]\npasword_hash = "x"\n',
            "unknown key 'pasword_hash' in [users.bob] (did you mean 'password_hash'?)",
        ),
        ("[users.bob]\ntags = []\n", '[users.bob] needs password_hash = "..."'),
        (
            '[server]\nlog_level = "verbose"\n',
            "[server] log_level must be debug, info, warning or error, not 'verbose'",
        ),
        ('[server]\nstats_interval = "60"\n', "[server] stats_interval must be a whole number of seconds, not '60'"),
        ('[server]\nbaud = "fast"\n', "[server] baud must be a positive number, not 'fast'"),
        ("[server]\njournal_max_bytes = 10\n", "[server] journal_max_bytes must be a number of bytes, at least 4096"),
        ("[[listener]]\nport = 5672\n[[listener]]\nbind = 7\n", "[[listener]] #2 bind must be an address, not 7"),
        ('[metrics]\nport = "9090"\n', "[metrics] port must be a number from 0 to 65535, not '9090'"),
        ('[server]\nboard = "esp33"\n', "[server] board: unknown board 'esp33'"),
        ('[users.sensor]\npassword_hash = "..."\n', "[users.sensor] password_hash is not a password hash"),
        ("[nonsense]\n", "unknown section [nonsense]"),
        ('[uplink]\nhours = ["25:00-01:00"]\n', '[uplink] hours must be a list of windows "HH:MM-HH:MM"'),
        ("[uplink]\nevery = 600\n", "[uplink] every and open_for go together"),
        ("[uplink]\nevery = 600\nopen_for = 600\n", "[uplink] open_for must be more than 0 and less than every"),
        ("[uplink]\nmax_byte_rate = -1\n", "[uplink] max_byte_rate must be a positive number, not -1"),
        (
            '[[bridge]]\nname = "b"\nuri = "amqp://h/"\nqueue = "q"\npriority = 10\n',
            "bridge 'b': priority must be a whole number from 0 to 9, not 10",
        ),
        ("this is not toml", "is not valid"),
        pytest.param(
            "a = " + "[" * 5000 + "]" * 5000, "is not valid: maximum recursion depth exceeded", id="nested-too-deep"
        ),
    ],
)
def test_bad_config_is_one_readable_line(tmp_path, text, message):
    """Each mistake in one line naming the file, the section and the key (a misspelt key with
    the nearest one there is)."""
    config = _config(tmp_path, text)
    result = _hutch("serve", "--config", config, "--port", "0")
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("hutch: %s: " % config) or "not valid" in message, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


DEEP_JSON = "[" * 5000 + "]" * 5000  # (nested past Python's recursion limit)


def test_definitions_nested_too_deep_are_one_readable_line(tmp_path):
    definitions = tmp_path / "definitions.json"
    definitions.write_text(DEEP_JSON)
    result = _hutch("serve", "--definitions", str(definitions), "--port", "0", "--data", str(tmp_path / "d"))
    assert result.returncode == 2
    assert result.stderr.startswith("hutch: definitions file %s is not JSON: maximum recursion depth" % definitions)
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_reload_of_a_config_nested_too_deep_is_refused_and_the_broker_serves_on(tmp_path):
    config = tmp_path / "hutch.toml"
    config.write_text("[limits]\nmax_queues = 100\n")
    broker = RunningBroker([HUTCH, "serve", "--config", str(config)], tmp_path).start()
    try:
        config.write_text("a = " + DEEP_JSON)
        refused = _hutch("ctl", "reload", "--data", broker.data)
        said = "reload refused, the running config is kept: config file %s is not valid: maximum recursion" % config
        assert refused.returncode != 0 and said in refused.stdout + refused.stderr, refused
        conn = _connect(broker)
        conn.channel().queue_declare("still-served")
        conn.close()
    finally:
        broker.stop()
    assert [line for line in broker.errors() if "reload refused" not in line] == [], broker.log()[-3000:]
    assert "Traceback" not in broker.log()


def test_missing_config_file(tmp_path):
    result = _hutch("serve", "--config", str(tmp_path / "nope.toml"))
    assert result.returncode == 2 and "cannot read config file" in result.stderr


def test_port_in_use_is_a_readable_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _hutch("serve", "--bind", "127.0.0.1", "--port", str(port), "--data", str(tmp_path / "d"))
    assert result.returncode == 1
    assert "cannot listen on 127.0.0.1:%d" % port in result.stderr and "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "d")  # a start that failed leaves no new data folder behind


def test_an_option_of_the_wrong_kind_is_named_as_the_option(tmp_path):
    result = _hutch("serve", "--log-level", "verbose", "--data", str(tmp_path / "d"))
    assert result.returncode == 2
    assert result.stderr == "hutch: --log-level must be debug, info, warning or error, not 'verbose'\n"


def test_data_folder_is_created(tmp_path):
    broker = RunningBroker([HUTCH, "serve"], tmp_path).start()
    broker.stop()
    assert os.path.isdir(broker.data)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_shutdown_closes_clients_with_320(tmp_path, sig):
    broker = RunningBroker([HUTCH, "serve"], tmp_path).start()
    conn = _connect(broker)
    channel = conn.channel()
    channel.queue_declare("q")
    broker.proc.send_signal(sig)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.2)
    assert closed.value.reply_code == 320
    assert broker.proc.wait(10) == 0
    assert "shutting down" in broker.log() and "stopped" in broker.log()


def test_log_names_connections_and_errors(broker):
    conn = _connect(broker)
    channel = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        channel.queue_declare("missing", passive=True)
    conn.close()
    closed = "channel 1 closed: NOT_FOUND - no queue 'missing' in vhost '/'"
    wait_until(lambda: closed in broker.log(), what="the channel's close in the broker's log")
    log = broker.log()
    assert "connection open (user 'guest', client Pika Python Client Library)" in log
    assert "channel 1 closed: NOT_FOUND - no queue 'missing' in vhost '/'" in log
    wait_until(lambda: "connection closed (user 'guest')" in broker.log(), what="the connection's close in the log")


def test_version():
    for command in (["version"], ["--version"]):
        result = _hutch(*command)
        assert result.returncode == 0 and result.stdout.startswith("hutch "), command


def test_passwd_reads_a_password_on_standard_input(tmp_path):
    """`echo pw | hutch passwd`: a hash of that line, which logs in (not a traceback)."""
    done = subprocess.run([HUTCH, "passwd"], input="greenhouse\n", capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    stored = done.stdout.strip()
    from hutch.core.auth import Users

    assert Users({"sensor": stored}).check("sensor", "greenhouse", False) is None


def test_a_misspelt_option_is_said_in_the_usage_of_its_command():
    result = _hutch("serve", "--prot", "1")
    assert result.returncode == 2 and "usage: hutch serve" in result.stderr and "--prot" in result.stderr


def test_memory_budget_blocks_publisher_then_recovers(tmp_path):
    """A publisher faster than the budget is blocked (connection.blocked), nothing is lost, and it
    is unblocked once a consumer drains the queue."""
    config = _config(tmp_path, "[limits]\ntotal_max_messages = 200\nlow_water_percent = 50\n")
    broker = RunningBroker([HUTCH, "serve", "--config", config], tmp_path).start()
    try:
        publisher = _connect(broker)
        events = blocked_notices(publisher)
        pub = publisher.channel()
        pub.queue_declare("flood")
        for i in range(300):
            pub.basic_publish("", "flood", b"%d" % i)  # pika buffers these; the broker stops reading at 200
        pump_until(publisher, lambda: events, what="connection.blocked")
        assert events == ["blocked"]
        assert "publishers blocked" in broker.log()
        consumer = _connect(broker)
        sub = consumer.channel()
        received = drain(sub, "flood", 300, publisher)
        assert received == [b"%d" % i for i in range(300)]  # every message, in order
        pump_until(publisher, lambda: events[-1] == "unblocked", what="connection.unblocked")
        assert events[-1] == "unblocked"
        publisher.close()
        consumer.close()
    finally:
        assert broker.stop() == 0
    assert not broker.errors()


def test_the_log_goes_to_a_file_when_asked(tmp_path):
    """--log-file: the broker's log lines are appended there (standard error stays quiet); a file
    that cannot be written is one line and exit 1."""
    log_file = tmp_path / "hutch.log"
    broker = RunningBroker([HUTCH, "serve", "--log-file", str(log_file)], tmp_path)
    proc = subprocess.Popen(broker.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(
            lambda: log_file.exists() and "listening for AMQP 0-9-1" in log_file.read_text(), 30, what="the log file"
        )
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
        conn.close()
        wait_until(
            lambda: "connection closed (user 'guest')" in log_file.read_text(), 10, what="the close in the log file"
        )
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err == "", err
    refused = _hutch("serve", "--port", "0", "--log-file", str(tmp_path / "no-such-folder" / "hutch.log"))
    assert refused.returncode == 1 and refused.stderr.startswith("hutch: cannot write the log file "), refused.stderr
