"""What `hutch install-service --root R` leaves under R, checked the same by the tests that run it
(tests/interop/system/test_service.py from a checkout, tests/docs/test_install.py after a plain
`pip install .`)."""

import os


def assert_scripts_name_opt_hutch(root):
    """Every script of ROOT/opt/hutch/bin starts with /opt/hutch's python, as it will be once the
    tree is copied to / (`sudo /opt/hutch/bin/hutch ctl status`), and names the root nowhere."""
    folder = os.path.join(root, "opt/hutch/bin")
    with open(os.path.join(folder, "hutch")) as f:
        assert f.readline() == "#!/opt/hutch/bin/python\n"
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as f:
                assert root.encode() not in f.read(), "%s names %s" % (name, root)
