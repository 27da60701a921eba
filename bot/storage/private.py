"""This user's state directory, and what is kept in it, private to this user or refused.

The shell keeps its Redis (socket, append-only file) under ``$XDG_STATE_HOME/upgradebot``
(:mod:`bot.storage.local`), and ``upgradebot local start`` kubesim's kubeconfig, a policy and
Bob's token under its ``try/`` (:mod:`bot.shell.local`). Whoever can write there can answer
in place of the Redis, or replace the policy that says who approves. So, before anything is
read or written there (attack finding 8):

- each directory used (``upgradebot/``, ``try/``) is made with mode 0700 when missing; when
  present it must be a directory (not a symbolic link, to anywhere: :func:`os.lstat`), owned by
  this user, that neither the group nor others can write;
- the directory holding ``upgradebot/`` (``XDG_STATE_HOME``, else ``~/.local/state``) must
  belong to this user or root and, if others can write it, be sticky as ``/tmp`` is (else any
  of them could rename ``upgradebot/`` away and put one of theirs in its place);
- a file reused (the policy, the token) must be a regular file of this user's that neither
  the group nor others can write; one written is created afresh with mode 0600
  (:func:`write_private`, ``O_EXCL``: never through a link left in its place).

Anything else is :class:`UnsafeState`: one line naming the path and what to do, exit 2; nothing
is changed.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from handlers import startup_messages as startup_msg

SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH


class UnsafeState(RuntimeError):
    """A state directory or file another user could have put there, or could replace."""


def private_dir(path: Path) -> Path:
    """``path``, a directory of this user's alone: made (0700) if missing, else checked; its parent checked."""
    _check_parent(path.parent)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    _check(path, directory=True)
    return path


def existing_dir(path: Path) -> bool:
    """Whether ``path`` exists, as :func:`private_dir` would accept it (nothing is made)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    _check_parent(path.parent)
    _check(path, directory=True)
    return True


def private_file(path: Path) -> bool:
    """Whether ``path`` exists as this user's own regular file, which no one else can write;
    False when missing; :class:`UnsafeState` when it is anything else."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    _check(path, directory=False)
    return True


def write_private(path: Path, text: str) -> None:
    """``text`` into a new file ``path`` (whatever was there is removed first), mode 0600."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def _check(path: Path, *, directory: bool) -> None:
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeState(startup_msg.state_is_a_link(str(path), os.readlink(path)))
    if not (stat.S_ISDIR(info.st_mode) if directory else stat.S_ISREG(info.st_mode)):
        raise UnsafeState(startup_msg.state_not_kind(str(path), "a directory" if directory else "a regular file"))
    if info.st_uid != os.geteuid():
        raise UnsafeState(startup_msg.state_not_owned(str(path), info.st_uid))
    if info.st_mode & SHARED_WRITE:
        raise UnsafeState(startup_msg.state_shared(str(path), stat.S_IMODE(info.st_mode), directory=directory))


def _check_parent(parent: Path) -> None:
    """The directory holding a private one: made if missing (0700, as XDG asks); it and every
    directory above it (links followed: the user chose them) this user's or root's, and sticky
    if others can write it, as OpenSSH's StrictModes asks of a key's path: whoever may rename a
    directory on the way may put a tree of theirs in the private one's place."""
    if not parent.exists():
        parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    real = parent.resolve()
    for directory in (real, *real.parents):
        info = os.stat(directory)
        named = str(directory) if directory == real else f"{directory} (above {parent})"
        if info.st_uid not in (os.geteuid(), 0):
            raise UnsafeState(startup_msg.state_parent_not_owned(named, info.st_uid))
        if info.st_mode & SHARED_WRITE and not info.st_mode & stat.S_ISVTX:
            raise UnsafeState(startup_msg.state_parent_shared(named, stat.S_IMODE(info.st_mode)))
