"""Mount namespaces for tests that need a folder to look different to one process (`unshare`)."""

from __future__ import annotations

import os
import subprocess


def private_mounts() -> list[str]:
    """How to run a command in a mount namespace of its own (root, or a user namespace)."""
    command = ["unshare", "--mount", "--propagation", "private"]
    return command if os.geteuid() == 0 else [*command, "--map-root-user"]


def can_mount_privately() -> bool:
    """Whether this machine lets a process mount in a namespace of its own."""
    try:
        probe = [*private_mounts(), "mount", "-t", "tmpfs", "none", "/mnt"]
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
