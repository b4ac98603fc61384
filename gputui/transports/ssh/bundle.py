"""The collector as it is shipped to a remote ``python3``: a bundle of its modules, and the loader that runs
it.

Nothing of gputui is installed on a remote host. Its ``python3`` runs a short fixed first stage (``loader``)
from the command line, and stdin carries, in order:

1. ``gputui/agent/remote/boot.py``, zlib-compressed: the second stage, which serves the bundle's modules to
  the
   import system from a finder on ``sys.meta_path`` (the way mitogen starts a remote interpreter with nothing
   installed, but all at once, since the module set is closed);
2. the bundle: the source of every module of ``gputui.agent`` (a package ``gputui`` of its own around it,
   empty) and of the client's own pynvml, served only where the host has no pynvml of its own;
3. the modules every host imports, the shipped pynvml included (compiling it costs a remote python more
   than the rest of its start), compiled by this python without their docstrings (nothing reads them
   there): a remote python with the same bytecode magic number runs them as they are, any other compiles
   the sources it imports (``gputui.agent.SHIPPED_AS_SOURCE`` are always compiled there, by the few hosts
   that import them).

Each module's source and code is compressed on its own, and decompressed (and unmarshalled) only when the
remote python imports it, or shows its source in a traceback: a host pays for the modules it runs, not for
the kill, reset, HTTP and nvidia-smi modules a sample never loads, nor for any source when the code is its.

The command line holds only fixed text, three integers (the sizes of the parts) and the magic number in hex;
nothing from process data or user strings ever becomes part of it. After the bundle, stdin carries the
collector's JSON-line commands. Building a bundle (compiling and compressing) is done once per process and
kept in ``$XDG_CACHE_HOME/gputui`` for the next one, keyed by what ``os.stat`` says of every module file
(size, modification and change times, inode: a rewritten file always moves its change time) and by this
python's bytecode magic, so a process that finds its bundle there reads no source; the SSH transport and the
system-OpenSSH transport both ship it through ``bundle_for`` and ``loader``.

The cache runs code on every host gputui reaches, so it is used only through ``gputui.agent.safefile``: a
folder owned by the user (or root) that nobody else may write, files that are regular, not links, owned by
the user. Anything else is not read, not written, and the bundle is built in memory for that run; the user is
told once, in one line on stderr, why the cache was skipped.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import marshal
import os
import re
import sys
import threading
import zlib

import gputui.agent
from gputui.agent import safefile
from gputui.agent.protocol import BOOT_NAME
from gputui.core.link import LinkError
from gputui.core.model import Record

AGENT_PACKAGE = "gputui.agent"
ENTRY = "gputui.agent.__main__"
"""The module the remote python runs as ``__main__``."""
STAND_IN_MODULE = "gputui_collector"
"""The name a single-module stand-in collector (``bundle_of_source``) is served under."""
BOOT_MODULE = "gputui.agent.remote.boot"
FALLBACK_MODULES = ("pynvml",)
"""Shipped, but served only to a python that has none of its own."""
BOOT_FILE = BOOT_NAME
"""The second stage's file name in tracebacks."""
BUNDLE_ROOT = "<gputui-bundle>/"
"""File names of shipped modules start with this (``boot.BUNDLE_ROOT``): tracebacks name the module, and no
file of the remote host is taken for it."""
ZLIB_LEVEL = 6
"""Level 9 costs several times the CPU for about 1 % fewer bytes."""
CACHE_FORMAT = "gputui-bundle 5"
CACHE_KEEP = 8
CACHE_MAX_BYTES = 32 << 20
"""A cached bundle is well under a megabyte; anything this large is not one."""
PYTHON_MIN = (3, 8)
"""The oldest python the collector runs on; the first stage checks it before anything else is compiled."""
TOO_OLD_STATUS = 125
"""The first stage's exit status on an older python (after one line ``TOO_OLD_MARK`` major.minor.micro)."""
TOO_OLD_MARK = "gputui-python-too-old"
"""Bundles kept in the cache directory (the newest ones): one per installed version in use."""

_MAGIC_RE = re.compile(r"[0-9a-f]{4,16}")


class BundleError(LinkError):
    """The collector cannot be bundled from this installation (a module missing or unreadable)."""


class Bundle(Record):
    """The three parts stdin gets before the JSON-line commands (see the module docstring).

    Attributes:
        boot_zlib: The second stage (``gputui/agent/remote/boot.py``), compressed.
        boot_code: The second stage compiled by this python, marshalled and compressed: what a remote
            python with the same bytecode magic number runs instead of compiling ``boot_zlib``.
        sources: The bundle (entry module, modules with their sources compressed one by one, fallback
            names), marshalled.
        codes: Module name -> its code compiled by this python, marshalled and compressed, all marshalled
            (empty: none).
        magic_hex: This python's bytecode magic number: a remote python with another one ignores the code.
    """

    boot_zlib: bytes
    boot_code: bytes
    sources: bytes
    codes: bytes
    magic_hex: str

    @property
    def data(self) -> bytes:
        return self.boot_zlib + self.boot_code + self.sources + self.codes


Modules = dict[str, tuple[bool, str, bytes]]
"""Module name -> (is a package, file name as tracebacks show it, source bytes)."""


def _module_file(name: str, is_package: bool) -> str:
    return BUNDLE_ROOT + name.replace(".", "/") + ("/__init__.py" if is_package else ".py")


ModuleFiles = dict[str, tuple[bool, str]]
"""Module name -> (is a package, the file its source is read from); ``gputui`` itself has none."""


def collector_files() -> ModuleFiles:
    """The files of every module of the installed ``gputui.agent`` (but the boot stage), and of the client's
    pynvml when it is installed here as one source file."""
    root = os.path.dirname(gputui.agent.__file__)
    found: list[tuple[str, bool, str]] = []
    for folder, _folders, names in os.walk(root):
        package = os.path.relpath(folder, root).split(os.sep) if folder != root else []
        for file_name in names:
            if not file_name.endswith(".py"):
                continue
            stem = file_name[:-3]
            is_package = stem == "__init__"
            name = ".".join((AGENT_PACKAGE, *package) if is_package else (AGENT_PACKAGE, *package, stem))
            if name != BOOT_MODULE:
                found.append((name, is_package, os.path.join(folder, file_name)))
    files: ModuleFiles = {name: (is_package, path) for name, is_package, path in sorted(found)}
    for name in FALLBACK_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or spec.submodule_search_locations is not None:
            continue  # not installed here, or a package (nvidia-ml-py's pynvml is one source file)
        if spec.origin.endswith(".py"):
            files[name] = (False, spec.origin)
    return files


def collector_modules(files: ModuleFiles | None = None) -> Modules:
    """Every module of ``files`` (default: ``collector_files()``) with its source, and an empty ``gputui``
    around them; a fallback module that cannot be read is left out (the remote side then uses its own).

    Raises:
        BundleError: A module of the package cannot be read.
    """
    modules: Modules = {"gputui": (True, _module_file("gputui", True), b"")}
    for name, (is_package, path) in (collector_files() if files is None else files).items():
        try:
            modules[name] = (is_package, _module_file(name, is_package), _read_file(path))
        except OSError as exc:
            if name in FALLBACK_MODULES:
                continue
            raise BundleError(f"cannot read the collector's modules: {exc.strerror or exc}") from None
    return modules


def _read_file(path: str | os.PathLike[str]) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def boot_path() -> str:
    """``gputui/agent/remote/boot.py`` of this installation."""
    spec = importlib.util.find_spec(BOOT_MODULE)
    if spec is None or spec.origin is None:
        raise BundleError("gputui/agent/remote/boot.py is missing from this installation")
    return spec.origin


def boot_source() -> bytes:
    """The second stage's source (``gputui/agent/remote/boot.py``)."""
    try:
        return _read_file(boot_path())
    except OSError as exc:
        raise BundleError(f"cannot read gputui/agent/remote/boot.py: {exc.strerror or exc}") from None


def build(modules: Modules, entry: str, boot: bytes) -> Bundle:
    """The bundle of ``modules`` that runs ``entry``; ``SHIPPED_AS_SOURCE`` only as source.

    Code is compiled with ``dont_inherit`` (this module's own ``__future__`` flags must not leak into it) and
    without docstrings. A module that does not compile here is shipped as source only.
    """
    fallbacks = tuple(name for name in FALLBACK_MODULES if name in modules)
    source_only = {f"{AGENT_PACKAGE}.{name}" for name in gputui.agent.SHIPPED_AS_SOURCE}
    codes = {}
    for name, (_is_package, filename, source) in modules.items():
        if name in source_only:
            continue
        try:
            code = compile(source, filename, "exec", dont_inherit=True, optimize=2)
        except (SyntaxError, ValueError):
            continue
        codes[name] = zlib.compress(marshal.dumps(code), ZLIB_LEVEL)
    shipped = {
        name: (is_package, filename, zlib.compress(source, ZLIB_LEVEL))
        for name, (is_package, filename, source) in modules.items()
    }
    boot_code = compile(boot, BOOT_FILE, "exec", dont_inherit=True, optimize=2)
    return Bundle(
        zlib.compress(boot, ZLIB_LEVEL),
        zlib.compress(marshal.dumps(boot_code), ZLIB_LEVEL),
        marshal.dumps((entry, shipped, fallbacks)),
        marshal.dumps(codes) if codes else b"",
        importlib.util.MAGIC_NUMBER.hex(),
    )


_lock = threading.Lock()
_collector: Bundle | None = None


def bundle_for(source: bytes | None = None) -> Bundle:
    """The bundle to ship: the installed collector (None), or a stand-in collector's source.

    Built once per process (and per source), under a lock: the links of a fleet open at the same moment, and
    each building its own copy would cost a core for seconds. The installed collector's bundle is also kept
    in ``cache_dir()`` for the next process (``cache_key``).
    """
    global _collector
    with _lock:
        if source is not None:
            return bundle_of_source(source)
        if _collector is None:
            files = collector_files()
            key = cache_key(files, ENTRY)
            try:
                _collector = _read_cache(key)
                if _collector is None:
                    _collector = _build_installed(files)
                    _write_cache(key, _collector)
            except safefile.UnsafeFile as exc:
                _collector = _build_installed(files)
                _say_cache_skipped(str(exc))
        return _collector


def _build_installed(files: ModuleFiles) -> Bundle:
    """The installed collector's bundle, from the sources of ``files`` (read only on a cache miss)."""
    return build(collector_modules(files), ENTRY, boot_source())


def _say_cache_skipped(why: str) -> None:
    """The one line that says why the cache was not used (once per process: the bundle is built once)."""
    try:
        print(f"gputui: collector cache not used: {why}; built in memory for this run", file=sys.stderr)
    except (OSError, ValueError):
        pass


@functools.lru_cache(maxsize=4)
def bundle_of_source(source: bytes) -> Bundle:
    """A bundle whose one module, ``source``, runs as ``__main__`` (a stand-in collector in tests)."""
    if not source:
        raise BundleError("collector source is empty")
    modules = {STAND_IN_MODULE: (False, _module_file(STAND_IN_MODULE, False), source)}
    return build(modules, STAND_IN_MODULE, boot_source())


def loader(bundle: Bundle) -> str:
    """The fixed first stage for ``python3 -c``: it reads and runs the second stage, which reads the rest."""
    if not bundle.sources or not bundle.boot_zlib or not bundle.boot_code:
        raise BundleError("collector bundle is empty")
    if not _MAGIC_RE.fullmatch(bundle.magic_hex):
        raise BundleError(f"unexpected bytecode magic number {bundle.magic_hex!r}")
    # The version test comes first, in syntax every python parses (2.7 too): an older one says which it is
    # and ends, before the second stage's syntax could fail on it. A python with this one's bytecode magic
    # runs the second stage's code; any other compiles its source.
    major, minor = PYTHON_MIN
    magic = bundle.magic_hex
    return (
        f"import sys;sys.version_info>=({major:d},{minor:d}) or (sys.stderr.write("
        f'"{TOO_OLD_MARK} %d.%d.%d\\n"%tuple(sys.version_info[:3])),sys.exit({TOO_OLD_STATUS:d}));'
        f'import zlib,marshal;i=sys.stdin.buffer;g={{"__name__":"{BOOT_NAME}"}};'
        f"s=i.read({len(bundle.boot_zlib):d});c=i.read({len(bundle.boot_code):d});"
        'm=bytes(getattr(sys.modules.get("_frozen_importlib_external"),"MAGIC_NUMBER",b"")).hex();'
        f'exec(marshal.loads(zlib.decompress(c)) if m=="{magic}" else '
        f'compile(zlib.decompress(s),"{BOOT_FILE}","exec"),g);'
        f'g["boot"](i,{len(bundle.sources):d},{len(bundle.codes):d},"{magic}")'
    )


# -- the cache ---------------------------------------------------------------------------------------------


def cache_dir() -> str:
    """``$XDG_CACHE_HOME/gputui`` when that variable holds an absolute path, else ``~/.cache/gputui``."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if base and os.path.isabs(base):
        return os.path.join(base, "gputui")
    return os.path.join(os.path.expanduser("~"), ".cache", "gputui")


def cache_key(files: ModuleFiles, entry: str) -> str:
    """What the bundle of ``files`` running ``entry`` is cached under: the format, this python's magic and
    the compression level, then the boot stage's and every module's file as ``os.stat`` describes it.

    Raises:
        BundleError: A module of the package (or the boot stage) cannot be found.
    """
    parts = [CACHE_FORMAT, importlib.util.MAGIC_NUMBER.hex(), str(ZLIB_LEVEL), entry]
    for name, (is_package, path) in [(BOOT_MODULE, (False, boot_path())), *sorted(files.items())]:
        try:
            st = os.stat(path)
        except OSError as exc:
            if name in FALLBACK_MODULES:
                continue  # left out of the bundle as well (``collector_modules``)
            raise BundleError(f"cannot read the collector's modules: {exc.strerror or exc}") from None
        parts.append(
            f"{name}:{int(is_package)}:{path}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"
        )
    return "\n".join(parts)


def cache_path(key: str) -> str:
    """The cache file of ``key``; its header holds the whole key, so two keys sharing a name never mix."""
    data = key.encode("utf-8", "surrogateescape")
    return os.path.join(cache_dir(), f"bundle-{zlib.crc32(data):08x}{zlib.adler32(data):08x}.bin")


def cache_header(key: str, bundle: Bundle) -> dict[str, object]:
    """The first line of ``bundle``'s cache file (JSON): what it is, and a checksum against a torn write."""
    return {
        "format": CACHE_FORMAT,
        "key": key,
        "magic": bundle.magic_hex,
        "sizes": [len(bundle.boot_zlib), len(bundle.boot_code), len(bundle.sources), len(bundle.codes)],
        "crc32": zlib.crc32(bundle.data),
    }


def _read_cache(key: str) -> Bundle | None:
    """The cached bundle of ``key``, or None when there is none or it is not whole.

    Raises:
        safefile.UnsafeFile: The cache folder or file must not be used (nor written).
    """
    data = safefile.read_bytes(cache_path(key), CACHE_MAX_BYTES)
    if data is None:
        return None
    try:
        header_end = data.index(b"\n")
        header = json.loads(data[:header_end])
        body = data[header_end + 1 :]
        if header.get("format") != CACHE_FORMAT or header.get("key") != key:
            return None
        if zlib.crc32(body) != header.get("crc32"):
            return None
        ends = [sum(header["sizes"][: n + 1]) for n in range(4)]
        if ends[3] != len(body):
            return None
        boot, boot_code, sources, codes = (body[a:b] for a, b in zip([0, *ends[:3]], ends, strict=True))
        return Bundle(boot, boot_code, sources, codes, str(header["magic"]))
    except (ValueError, KeyError, TypeError, IndexError):
        return None


def _write_cache(key: str, bundle: Bundle) -> None:
    """Keep ``bundle`` for the next process (best effort: a cache that cannot be written changes nothing).

    Raises:
        safefile.UnsafeFile: The cache folder must not be used.
    """
    directory = cache_dir()
    try:
        os.close(safefile.open_folder(directory, create=True))
    except safefile.UnsafeFile:
        if not os.path.isdir(directory):
            return  # cannot be made (read-only home): nothing to warn about
        raise
    try:
        safefile.write_atomic(
            cache_path(key), json.dumps(cache_header(key, bundle)).encode() + b"\n" + bundle.data
        )
    except safefile.UnsafeFile:
        return
    try:
        paths = [
            os.path.join(directory, name)
            for name in os.listdir(directory)
            if name.startswith("bundle-") and name.endswith(".bin")
        ]
        paths.sort(key=lambda path: os.lstat(path).st_mtime, reverse=True)
        for old in paths[CACHE_KEEP:]:
            os.unlink(old)
    except OSError:
        pass
