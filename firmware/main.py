"""hutch on a board: start the broker from hutch.json.

MicroPython runs this file at every reset, after boot.py. It reads hutch.json
beside it (the board's root folder), joins Wi-Fi when the file has a "wifi"
section and the board has a network module, and runs the broker until Ctrl-C
(mpremote sends one when it connects; the REPL follows). Without hutch.json
it starts nothing and leaves the REPL free.

hutch.json has the sections of hutch's config file, as JSON (MicroPython has
no TOML parser), plus "wifi"; `hutch flash --config FILE` writes it:

    {"server": {"board": "esp32", "port": 5672},
     "users": {"sensor": {"password_hash": "..."}},
     "auth": {"loopback_users": []},
     "wifi": {"ssid": "greenhouse", "password": "..."}}
"""

import gc
import time

CONFIG = "hutch.json"
WIFI_TIMEOUT_MS = 20000


def join_wifi(wifi):
    """Join the network named in the "wifi" section; False if the board cannot."""
    try:
        import network
    except ImportError:  # no radio (the unix port, a board wired by UART only)
        print("hutch: no network module on this board: wifi section skipped")
        return False
    ssid = wifi["ssid"]
    wlan = network.WLAN(network.STA_IF)
    wlan.active(True)
    if not wlan.isconnected():
        print("hutch: joining Wi-Fi %s" % ssid)
        wlan.connect(ssid, wifi.get("password", ""))
        start = time.ticks_ms()
        while not wlan.isconnected():
            if time.ticks_diff(time.ticks_ms(), start) > WIFI_TIMEOUT_MS:
                print("hutch: could not join Wi-Fi %s (status %s)" % (ssid, wlan.status()))
                return False
            time.sleep_ms(250)
    print("hutch: on Wi-Fi %s as %s" % (ssid, wlan.ifconfig()[0]))
    return True


def read_settings():
    """(the broker's settings, the wifi section) from hutch.json; None after printing why not.
    A function of its own: what reads them is garbage once it returns (serve.forget)."""
    from hutch.server import config, options

    try:
        wifi = config.read(CONFIG).get("wifi")
        if wifi is not None and not isinstance(wifi.get("ssid"), str):
            raise config.ConfigError('%s: wifi needs "ssid": "NAME"' % CONFIG)
        return options.settings(options.Options(config=CONFIG)), wifi
    except config.ConfigError as e:
        print("hutch: %s" % e)
        return None


def main():
    try:
        open(CONFIG).close()
    except OSError:
        print("hutch: no %s on this board, the broker is not started (hutch flash --config writes one)" % CONFIG)
        return 0
    found = read_settings()
    if found is None:
        return 2
    opts, wifi = found
    from hutch.server import serve

    serve.forget_settings()
    if wifi:
        join_wifi(wifi)
    gc.collect()
    return serve.run(opts)


if __name__ == "__main__":
    main()
