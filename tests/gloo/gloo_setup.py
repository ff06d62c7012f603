# SPDX-License-Identifier: MIT
"""gloo_setup.py - what the torch tests of the Gloo device share."""
import os
import socket
import sys

SKIP = 77  # the exit status meson counts as "skipped"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def device_lib(path):
    """The device library's absolute path (exits SKIP when it was not
    built), with Gloo and libfabric kept on the loopback interface."""
    lib = os.path.abspath(path)
    if not os.path.exists(lib):
        print(f"SKIP: {lib} was not built (meson option gloo)")
        sys.exit(SKIP)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("FI_TCP_IFACE", "lo")
    return lib
