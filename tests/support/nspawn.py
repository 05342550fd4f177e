"""A real systemd for the service's tests, booted by systemd-nspawn in a Debian tree of its own.

    tree = debian_tree()                 # made once by debootstrap from Debian's archive, kept
    container = Container(tree, binds)   # booted (its changes on a tmpfs: the tree stays as made)
    container.run("systemctl", "start", "hutch")
    container.host_pid(65)               # a process of the container, as the machine numbers it
    container.stop()

Never boot systemd on the machine's own root: its systemd-tmpfiles --remove --boot empties the
machine's /tmp, and a PID namespace alone does not keep it out. The container has a root of its
own (the tree), booted with --volatile=overlay: whatever its systemd writes goes to a tmpfs over
the tree and is gone when it stops. It shares the machine's network (a test reaches its broker on
127.0.0.1), but not its mounts nor its processes. The machine's PID 1 is not systemd, so nspawn
runs without registering with systemd-machined (--register=no, --keep-unit).
"""

import fcntl
import os
import shutil
import subprocess
import time

TREE = os.environ.get("HUTCH_NSPAWN_TREE", "/var/tmp/hutch-nspawn/tree")
# what the tree has besides Debian's minimal base: systemd as its init, and the Python the
# service's virtualenv (made by the machine's python3, hutch install-service) links to
PACKAGES = "systemd,systemd-sysv,dbus,python3,python3-venv"
MIRROR = "http://deb.debian.org/debian"
STAMP = ".hutch-tree"  # in the tree: what it was made with (another list of packages: made anew)


def debian_tree():
    """The tree, made by debootstrap (2-3 minutes) if it is not there yet: the machine's Debian
    release, so its python3 is the one the service's virtualenv was made with."""
    stamp = "%s %s %s\n" % (_codename(), PACKAGES, MIRROR)
    os.makedirs(os.path.dirname(TREE), exist_ok=True)
    with open(TREE + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # (two runs at once: one makes it, the other waits)
        try:
            with open(os.path.join(TREE, STAMP)) as f:
                if f.read() == stamp:
                    return TREE
        except OSError:
            pass
        making = TREE + ".new"
        shutil.rmtree(making, ignore_errors=True)
        done = subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=" + PACKAGES, _codename(), making, MIRROR],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            raise AssertionError("debootstrap failed:\n" + (done.stdout + done.stderr)[-3000:])
        with open(os.path.join(making, STAMP), "w") as f:
            f.write(stamp)
        shutil.rmtree(TREE, ignore_errors=True)
        os.rename(making, TREE)
    return TREE


def _codename():
    with open("/etc/os-release") as f:
        for line in f:
            if line.startswith("VERSION_CODENAME="):
                return line.split("=", 1)[1].strip().strip('"')
    raise AssertionError("/etc/os-release names no VERSION_CODENAME: not a Debian machine")


class Container:
    def __init__(self, tree, binds, log_path):
        """binds: (path here, path in the container, writable) each."""
        assert os.path.realpath(tree) != "/", "never boot systemd on the machine's own root"
        command = [
            "systemd-nspawn",
            "--directory=" + tree,
            "--volatile=overlay",
            "--boot",
            "--register=no",
            "--keep-unit",
            "--console=pipe",
            "--machine=hutch-test-%d" % os.getpid(),
        ]
        for here, there, writable in binds:
            command.append("--%s=%s:%s" % ("bind" if writable else "bind-ro", here, there))
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        self.leader = None
        try:
            self.leader = self._leader()
            self._until_running()
        except BaseException:
            self.stop()
            raise

    def _leader(self):
        """The container's PID 1 (its systemd), nspawn's child, as the machine numbers it. nspawn
        first forks a child that makes the namespaces and the container's PID 1, then exits (nspawn
        reaps what it leaves): only a child that runs systemd is the one."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("systemd-nspawn exited with %s:\n%s" % (self.proc.returncode, self.output()))
            for pid in _pids():
                if _parent(pid) == self.proc.pid and _command(pid) == "systemd":
                    return pid
            time.sleep(0.1)
        raise AssertionError("systemd-nspawn started no container:\n" + self.output())

    def _until_running(self):
        deadline = time.monotonic() + 120
        asked = None
        while time.monotonic() < deadline:
            asked = self.run("systemctl", "is-system-running")
            if asked.stdout.strip() in ("running", "degraded"):
                return
            time.sleep(0.3)
        raise AssertionError(
            "the container's systemd is %r after 120 s (%s):\n%s" % (asked.stdout.strip(), asked.stderr, self.output())
        )

    def run(self, *command, timeout=90):
        """A command in the container (its namespaces, root and working folder), as root."""
        return subprocess.run(
            ["nsenter", "--target", str(self.leader), "--all", "--root", "--wd", *command],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def host_pid(self, pid):
        """The machine's number for the container's process pid."""
        namespace = os.readlink("/proc/%d/ns/pid" % self.leader)
        for candidate in _pids():
            try:
                if os.readlink("/proc/%d/ns/pid" % candidate) != namespace:
                    continue
                with open("/proc/%d/status" % candidate) as f:
                    for line in f:
                        if line.startswith("NSpid:") and line.split()[-1] == str(pid):
                            return candidate
            except OSError:
                continue
        raise AssertionError("no process %d in the container" % pid)

    def output(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()[-3000:]

    def stop(self):
        """Powered off as a machine is (nspawn's SIGTERM asks its systemd), killed if it hangs."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.log.close()


def _pids():
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _command(pid):
    """The name the process runs as (its comm), or None once it is gone."""
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def _parent(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
