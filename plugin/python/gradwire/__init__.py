# SPDX-License-Identifier: MIT
"""gradwire for Python: ctypes bindings over libgradwire.so.

- gradwire.lib: the exported table gradwire_plugin_v1 (include/gradwire/plugin.h)
  as ctypes structures, and Library, which loads it.
- gradwire.torch: PyTorch communication hooks, DDP and FSDP1 (imported on demand, so
  this package works without torch).
- gradwire.store: `python3 -m gradwire.store --port PORT` serves a TCPStore in a
  process of its own, so that no trainer holds the job's rendezvous.

No compiled extension: the package is plain Python and finds the shared
object through an explicit path, the GW_LIB environment variable (not a
GRADWIRE_* name: those belong to the C library, which rejects unknown ones),
the library `meson install` put with it (gradwire/_install.py), a build
folder next to the package, or the system's library path.
"""
from .lib import Library, GradwireError, load

__all__ = ["Library", "GradwireError", "load"]
