"""The private directory that holds a server's fallback socket.

Who may connect: the fallback (a grpcio server) listens on a Unix socket in
a directory that only this user can enter (``mkdtemp`` makes it 0700), so
only this user's processes can reach it; grpcio gives no hook to check a
peer's credentials, which rules out Linux abstract sockets (anyone on the
host may connect to one) and keeps this design on Linux and macOS alike.

Who removes it: only the process that created it (a forked child that
exits must not take its parent's socket away), on ``stop()`` or at exit.

What a process killed before that leaves behind is reclaimed by the next
server that starts: each directory holds ``owner.lock``, on which its owner
keeps an exclusive ``flock`` for as long as it lives. The kernel releases
that lock whatever ends the process (SIGKILL, an OOM kill, a crash), so a
lock that can be taken marks a directory nobody uses. A lock, unlike the
owner's pid, can't be fooled by pid reuse or by a temp directory shared
between pid namespaces (containers).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import weakref
from typing import Any

PREFIX = "pygrpc-native-"
_LOCK_NAME = "owner.lock"
SOCKET_NAME = "fallback.sock"
# Longest Unix socket path (sun_path holds 108 bytes with the NUL on Linux,
# 104 on macOS), less what mkdtemp adds after the prefix.
_MAX_SOCKET_PATH = 103 - 8


def base_dir() -> str:
    """Where fallback directories go: the temporary directory, unless its
    path is too long for a Unix socket below it (then /tmp)."""
    tmp = tempfile.gettempdir()
    if len(os.path.join(tmp, PREFIX, SOCKET_NAME)) + 1 > _MAX_SOCKET_PATH:
        return "/tmp"
    return tmp


class FallbackDir:
    """A fresh private directory, reclaimed from a dead owner if need be.

    Invariant: while this object's process lives and ``remove()`` hasn't
    run, the directory exists and its lock is held.
    """

    def __init__(self, owner: Any) -> None:
        """Creates the directory; it is removed when ``owner`` is collected
        or at exit, if this process still owns it."""
        reclaim_abandoned()
        self.path = tempfile.mkdtemp(prefix=PREFIX, dir=base_dir())
        # Locked before anything else is put in: a directory without a lock
        # file is one being created, which reclaim_abandoned() leaves alone.
        lock_fd = os.open(os.path.join(self.path, _LOCK_NAME), os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        self.socket_path = os.path.join(self.path, SOCKET_NAME)
        self._finalizer = weakref.finalize(owner, _remove, self.path, lock_fd, os.getpid())

    def remove(self) -> None:
        """Removes the directory (once; in the creating process only)."""
        self._finalizer()


def _remove(path: str, lock_fd: int, owner_pid: int) -> None:
    if os.getpid() != owner_pid:
        return  # a forked child: the directory is its parent's
    shutil.rmtree(path, ignore_errors=True)
    os.close(lock_fd)  # after the removal, so nobody reclaims it meanwhile


def reclaim_abandoned() -> None:
    """Removes this user's fallback directories whose owner has ended.

    A directory is abandoned when its lock file can be locked. Directories
    of other users, symlinks, and directories without a lock file (being
    created, or left by versions before the lock) are left alone.
    """
    tmp = base_dir()
    uid = os.getuid()
    try:
        entries = list(os.scandir(tmp))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(PREFIX):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != uid:
                continue
            fd = os.open(os.path.join(entry.path, _LOCK_NAME), os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # its owner lives
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        os.close(fd)
