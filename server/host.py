"""What a broker on CPython runs for `hutch ctl` beside its listeners: DATA/status.json every two
seconds (ports/status_file.py), the control socket (ports/control_socket.py, answered by
server/control.py), and the users an earlier `hutch ctl import` kept (DATA/users.json). A board
runs none of it (server/startup.py host_services), and its bundle leaves this module out.

    services = await HostServices(folder, runtime).start()   # before the listeners open
    services.stop()                                           # the runtime's last step
"""

from ..ports.control_socket import ControlSocket
from ..ports.status_file import StatusWriter
from .control import Control, load_users


class HostServices:
    def __init__(self, folder, runtime):
        self.folder = folder
        self.runtime = runtime
        self.status = StatusWriter(folder, runtime.broker, runtime.log)
        self.control = None

    async def start(self):
        users = self.runtime.broker.users
        config_users = list(users.hashes)  # the operator's: hutch ctl import leaves them alone
        add_imported_users(self.folder, users, self.runtime.log)
        self.status.start()
        control = ControlSocket(self.folder, Control(self.runtime, self.folder, config_users).handle, self.runtime.log)
        try:
            await control.start()
            self.control = control
        except OSError as e:  # said once; the broker serves its clients without it
            self.runtime.log(
                "warning", "no control socket in %s (hutch ctl cannot reach this broker): %s" % (self.folder, e)
            )
        return self

    def stop(self):
        if self.control is not None:
            self.control.stop()
        self.status.stop()  # what the broker left: `hutch ctl status` shows it as such


def add_imported_users(folder, users, log):
    """The users an earlier `hutch ctl import` kept in the data folder, added to the config's. A
    name the config now defines too is the config's, said in the log."""
    imported = load_users(folder, users.loopback_users)
    if imported is None:
        return
    for name in sorted(imported.hashes):
        if name in users.hashes:
            log("warning", "user '%s' is in the config and was imported by hutch ctl: the config's is used" % name)
            for table in (imported.hashes, imported.tags, imported.permissions or {}):
                table.pop(name, None)
    users.merge(imported)
