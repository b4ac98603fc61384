"""The one way gputui opens the files it keeps: state (baselines, audit log, watched ports, ui.json), its
config file and the collector cache.

Any of those paths may have been planted by someone else: a symbolic link that redirects a write, a FIFO that
blocks a read forever, a device that never ends, a file or folder another user can rewrite. So, like OpenSSH's
checks on ``~/.ssh``:

- the folder is opened without following a link, and must be a directory owned by the effective user or
  root that neither group nor others may write; every folder above it (its real path) must be owned by the
  effective user or root and not writable by group or others unless sticky (``/tmp``);
- a file is looked at (``lstat``) before it is opened, so a FIFO or a device is never opened at all, then
  opened relative to the checked folder with ``O_NOFOLLOW | O_NONBLOCK`` and checked again (``fstat``: the
  same regular file, owned by the effective user or root, not writable by group or others, not over its size
  cap);
- a file that is replaced is written to a temporary file in the same folder and renamed over it, so a reader
  sees the old or the new file, never a torn one.

Every refusal is an ``UnsafeFile`` whose ``str()`` is one line naming the path and what is wrong with it.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    PathText = str | os.PathLike[str]
    """A path as text, or as an object that gives it (``pathlib.Path``)."""

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_GROUP_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH
_PRIVATE_DENIED = stat.S_IRWXO | stat.S_IWGRP
"""A private key may be read by its owner and a group kept for keys (Debian's ``ssl-cert``), never others."""

_KINDS = (
    (stat.S_ISLNK, "a symbolic link (not followed)"),
    (stat.S_ISFIFO, "a FIFO, not a regular file"),
    (stat.S_ISSOCK, "a socket, not a regular file"),
    (stat.S_ISCHR, "a character device, not a regular file"),
    (stat.S_ISBLK, "a block device, not a regular file"),
    (stat.S_ISDIR, "a directory, not a regular file"),
)


def state_dir() -> str:
    """The directory for gputui's state files, on the host this runs on (not created here).

    ``$XDG_STATE_HOME/gputui`` when that variable holds an absolute path (the XDG spec says relative values
    are to be ignored), else ``~/.local/state/gputui``.
    """
    base = os.environ.get("XDG_STATE_HOME", "")
    if base and os.path.isabs(base):
        return os.path.join(base, "gputui")
    return os.path.join(os.path.expanduser("~"), ".local", "state", "gputui")


class UnsafeFile(Exception):
    """A file or folder gputui will not use. ``str()`` is one line naming the path and the cause."""


def _kind_problem(mode: int) -> str | None:
    """What is wrong with a file of this mode (None: a regular file)."""
    for test, problem in _KINDS:
        if test(mode):
            return problem
    return None if stat.S_ISREG(mode) else "not a regular file"


def _owner_problem(info: os.stat_result) -> str | None:
    if info.st_uid not in (os.geteuid(), 0):
        return f"owned by uid {info.st_uid}, neither you (uid {os.geteuid()}) nor root"
    return None


def _mode_problem(info: os.stat_result) -> str | None:
    if info.st_mode & _GROUP_OTHER_WRITE:
        return f"writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _parent(path: str) -> str:
    """The folder ``path`` is in (``pathlib.PurePath.parent``: "." for a bare name)."""
    return os.path.dirname(path.rstrip("/") or "/") or "."


def _name(path: str) -> str:
    return os.path.basename(path.rstrip("/"))


def _check_ancestors(folder: str) -> None:
    """Every folder above ``folder`` (by its real path): owned by the user or root, and not writable by group
    or others unless sticky (then nobody else can rename what is in it)."""
    ancestor = os.path.realpath(_parent(folder))
    while True:
        info = os.lstat(ancestor)
        problem = _owner_problem(info)
        if problem is None and info.st_mode & _GROUP_OTHER_WRITE and not info.st_mode & stat.S_ISVTX:
            problem = f"writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
        if problem is not None:
            raise UnsafeFile(f"folder {ancestor} (above {folder}): {problem}")
        above = os.path.dirname(ancestor)
        if above == ancestor:
            return
        ancestor = above


def _folder_descriptor(folder: str) -> int:
    """A descriptor of ``folder`` itself, never of what a link there points to.

    Raises:
        FileNotFoundError: nothing is there.
        UnsafeFile: a link, not a folder, or it cannot be opened (one line).
    """
    try:
        return os.open(folder, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            kind = _kind_problem(os.lstat(folder).st_mode) or "not a folder"
            raise UnsafeFile(f"folder {folder}: {kind.replace('regular file', 'folder')}") from None
        raise UnsafeFile(f"folder {folder}: cannot open ({exc.strerror or exc})") from None


def open_folder(folder: PathText, create: bool = False) -> int:
    """A descriptor of ``folder`` once it passes the checks (the caller closes it).

    Args:
        folder: The folder (state, config or cache).
        create: Make it (and its parents) first, owner-only, when missing.

    Raises:
        FileNotFoundError: It does not exist (and ``create`` is False).
        UnsafeFile: It, or a folder above it, fails a check; or it cannot be made or opened.
    """
    folder = os.fspath(folder)
    if create:
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        except FileExistsError:
            pass  # a non-directory there: said below
        except OSError as exc:
            raise UnsafeFile(f"cannot create folder {folder}: {exc.strerror or exc}") from None
    fd = _folder_descriptor(folder)
    try:
        info = os.fstat(fd)
        problem = _owner_problem(info) or _mode_problem(info)
        if problem is not None:
            raise UnsafeFile(f"folder {folder}: {problem}")
        _check_ancestors(folder)
    except OSError as exc:  # an ancestor vanished while looked at
        os.close(fd)
        raise UnsafeFile(f"folder {folder}: cannot check ({exc.strerror or exc})") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _private_problem(info: os.stat_result) -> str | None:
    if info.st_mode & _PRIVATE_DENIED:
        return (
            f"a private key that others may read (mode {stat.S_IMODE(info.st_mode):04o}; "
            "chmod 600, or 640 for a key group)"
        )
    return None


def _checked_file(
    fd: int, before: os.stat_result, path: str, max_bytes: int | None, private: bool = False
) -> None:
    info = os.fstat(fd)
    if (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino):
        raise UnsafeFile(f"{path}: replaced while it was opened")
    problem = _kind_problem(info.st_mode) or _owner_problem(info) or _mode_problem(info)
    if problem is None and private:
        problem = _private_problem(info)
    if problem is None and max_bytes is not None and info.st_size > max_bytes:
        problem = f"larger than {_size_text(max_bytes)}"
    if problem is not None:
        raise UnsafeFile(f"{path}: {problem}")


def _size_text(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


def _lstat_in(folder_fd: int, name: str, path: str) -> os.stat_result:
    """The entry ``name`` of the folder, not followed; UnsafeFile when it is no regular file."""
    info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    problem = _kind_problem(info.st_mode)
    if problem is not None:
        raise UnsafeFile(f"{path}: {problem}")
    return info


def read_bytes(
    path: PathText, max_bytes: int, follow_links: bool = False, private: bool = False
) -> bytes | None:
    """The bytes of ``path``, None when it (or its folder) does not exist.

    Args:
        path: The file.
        max_bytes: Its size cap.
        follow_links: Resolve links in ``path`` first (a config file kept in a dotfiles repository, a
            Kubernetes secret's ``..data`` link), then check the file and folders it leads to as any other.
        private: The file is a private key: others may not read it either.

    Raises:
        UnsafeFile: The file or its folder fails a check, is over ``max_bytes``, or cannot be read.
    """
    path = os.path.realpath(path) if follow_links else os.fspath(path)
    name = _name(path)
    try:
        folder_fd = open_folder(_parent(path))
    except FileNotFoundError:
        return None
    try:
        before = _lstat_in(folder_fd, name, path)
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, dir_fd=folder_fd)
        try:
            _checked_file(fd, before, path, max_bytes, private)
            data = read_at_most(fd, max_bytes + 1)
            if len(data) > max_bytes:
                raise UnsafeFile(f"{path}: larger than {_size_text(max_bytes)}")
            return data
        finally:
            os.close(fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnsafeFile(f"{path}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(folder_fd)


def read_plain(path: PathText, max_bytes: int) -> bytes | None:
    """The bytes of a file another program owns the rules of (the user's ssh files: known hosts, config,
    keys), None when it does not exist: links are followed and any owner or mode is taken, as ssh takes
    them, but it must be a regular file (a FIFO would block the open, a device the read) within
    ``max_bytes``.

    Raises:
        UnsafeFile: Not a regular file, over ``max_bytes``, or unreadable (one line naming the path).
    """
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnsafeFile(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISCHR(info.st_mode) and info.st_rdev == os.stat(os.devnull).st_rdev:
            return b""  # /dev/null: ssh's way to name no file
        problem = _kind_problem(info.st_mode)
        if problem is None and info.st_size > max_bytes:
            problem = f"larger than {_size_text(max_bytes)}"
        if problem is not None:
            raise UnsafeFile(f"{path}: {problem}")
        data = read_at_most(fd, max_bytes + 1)
        if len(data) > max_bytes:
            raise UnsafeFile(f"{path}: larger than {_size_text(max_bytes)}")
        return data
    except OSError as exc:
        raise UnsafeFile(f"{path}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def write_atomic(path: PathText, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data``: a temporary file in the same (checked, created if missing) folder,
    synced, then renamed over it, the rename synced too. A link or FIFO at ``path`` is replaced, never
    followed or opened.

    Raises:
        UnsafeFile: The folder fails a check, or the file cannot be written.
    """
    path = os.fspath(path)
    name = _name(path)
    folder_fd = open_folder(_parent(path), create=True)
    # os.urandom is what secrets.token_hex reads; importing secrets would load hmac, hashlib and random
    # into every one-shot that only reads a file.
    temporary = f".{name}.{os.urandom(6).hex()}.tmp"
    made = False
    try:
        fd = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode, dir_fd=folder_fd
        )
        made = True
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
        made = False
        os.fsync(folder_fd)  # the rename itself survives a power cut
    except OSError as exc:
        raise UnsafeFile(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        if made:
            try:
                os.unlink(temporary, dir_fd=folder_fd)
            except OSError:
                pass
        os.close(folder_fd)


def read_at_most(fd: int, limit_bytes: int) -> bytes:
    """Up to ``limit_bytes`` from ``fd``, short reads joined (ask one past a cap to tell it was passed)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit_bytes:
        chunk = os.read(fd, limit_bytes - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _append_whole(fd: int, data: bytes) -> None:
    """One write of ``data``, whole or not at all: a short write (a full disk) is cut off again, and a
    file whose last line was torn earlier (a crash, a full disk) gets its newline first, so the new line
    is never glued onto it."""
    size = os.fstat(fd).st_size
    if size and data and os.pread(fd, 1, size - 1) != b"\n":
        data = b"\n" + data
    written = os.write(fd, data)
    if written != len(data):
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - written))
        raise OSError(errno.ENOSPC, f"only {written} of {len(data)} bytes written, none kept")


def append(path: PathText, data: bytes) -> None:
    """Append ``data`` to ``path`` (created owner-only) in one write, so concurrent writers do not
    interleave, whole or not at all; the folder is created if missing.

    Raises:
        UnsafeFile: The file or its folder fails a check, or it cannot be written.
    """
    path = os.fspath(path)
    name = _name(path)
    folder_fd = open_folder(_parent(path), create=True)
    try:
        flags = os.O_RDWR | os.O_APPEND | _NOFOLLOW | os.O_NONBLOCK | _CLOEXEC  # read: its last byte
        while True:
            try:
                before = _lstat_in(folder_fd, name, path)
            except FileNotFoundError:
                try:
                    fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=folder_fd)
                except FileExistsError:
                    continue  # another writer created it first: check and append to that one
            else:
                fd = os.open(name, flags, dir_fd=folder_fd)
                try:
                    _checked_file(fd, before, path, None)
                except BaseException:
                    os.close(fd)
                    raise
            break
        try:
            _append_whole(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        raise UnsafeFile(f"{path}: cannot append ({exc.strerror or exc})") from None
    finally:
        os.close(folder_fd)


def open_shared_folder(folder: PathText) -> int:
    """A descriptor of a folder every user of the host shares, as /tmp (the caller closes it): made, sticky
    and writable by all, where missing. Any owner is taken (the first user who needed it made it); it must
    be a real directory, not a link, sticky wherever others may write it (nobody can then remove or rename
    another user's file in it), under folders that pass ``open_folder``'s checks of the folders above.

    Raises:
        UnsafeFile: It or a folder above it fails a check, or it cannot be made or opened.
    """
    folder = os.fspath(folder)
    made = True
    try:
        os.mkdir(folder, 0o700)  # owner-only until it is sticky
    except FileExistsError:
        made = False
    except OSError as exc:
        raise UnsafeFile(f"cannot create folder {folder}: {exc.strerror or exc}") from None
    try:
        fd = _folder_descriptor(folder)
    except FileNotFoundError as exc:  # removed since it was made or found
        raise UnsafeFile(f"folder {folder}: cannot open ({exc.strerror or exc})") from None
    try:
        if made:  # by descriptor: what was made, not what a link put there meanwhile would lead to
            os.fchmod(fd, 0o1777)
        info = os.fstat(fd)
        if info.st_mode & _GROUP_OTHER_WRITE and not info.st_mode & stat.S_ISVTX:
            mode = stat.S_IMODE(info.st_mode)
            raise UnsafeFile(f"folder {folder}: writable by group or others and not sticky (mode {mode:04o})")
        _check_ancestors(folder)
    except OSError as exc:
        os.close(fd)
        raise UnsafeFile(f"folder {folder}: cannot check ({exc.strerror or exc})") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_shared_file(folder_fd: int, name: str, path: str) -> int:
    """A read-only descriptor of the regular file ``name`` in a shared folder (``open_shared_folder``), made
    (readable by all) where missing; any owner is taken, never written (a lock's file). A link, FIFO or
    device planted there is refused without being opened. Linux refuses ``O_CREAT`` on another user's file
    in a sticky folder (``fs.protected_regular``): an existing file is opened without it.

    Raises:
        UnsafeFile: Not a regular file, or it cannot be opened.
    """
    flags = os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
    try:
        for _ in range(8):  # made and removed by others meanwhile: a few tries, never a loop without end
            try:
                before = _lstat_in(folder_fd, name, path)
            except FileNotFoundError:
                try:
                    fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=folder_fd)
                except FileExistsError:
                    continue
                os.fchmod(fd, 0o644)  # whatever the umask: another user's gputui opens it to lock it
                return fd
            try:
                fd = os.open(name, flags, dir_fd=folder_fd)
            except FileNotFoundError:
                continue
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(info.st_mode):
                os.close(fd)
                raise UnsafeFile(f"{path}: replaced while it was opened")
            return fd
    except OSError as exc:
        raise UnsafeFile(f"{path}: cannot open ({exc.strerror or exc})") from None
    raise UnsafeFile(f"{path}: made and removed again while it was opened")
