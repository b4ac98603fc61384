"""The second stage of the shipped collector: serve the bundle's modules to the remote ``python3``.

The SSH command line holds a short fixed first stage (``gputui.transports.ssh.bundle.loader``) that reads this
module's source from stdin, runs it and calls ``boot``. ``boot`` reads the rest of the bundle from the same
stdin: the modules' sources, then their compiled code (used only when this python's bytecode magic number is
the one it was compiled for). A finder on ``sys.meta_path`` then serves them like files of a normal package:
relative imports work, each module is executed when first imported, and tracebacks name the real modules
with their source lines. Modules the bundle marks as fallbacks (the client's pynvml) are served only where
the host has none of its own. The entry module then runs as ``__main__``; the JSON-line commands that
follow the bundle on stdin are the collector's.

Standard library only, Python 3.8, no names left behind: this module is not part of the bundle it serves.
"""

from __future__ import annotations

import gc
import marshal
import sys
import zlib
from importlib.machinery import ModuleSpec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.abc import Loader as LoaderBase
    from typing import Any, BinaryIO
else:
    LoaderBase = object  # what the import system calls, without importing importlib.abc

BUNDLE_ROOT = "<gputui-bundle>/"
"""What the modules' file names start with: no file of the remote host can have that name."""


class BundleFinder(LoaderBase):
    """Finds and loads the modules of a bundle (a meta path finder and their loader).

    Args:
        modules: Module name -> (is a package, file name, source bytes compressed).
        codes: Module name -> its code compiled for this python, marshalled and compressed (may lack some or
            all modules); decompressed when the module is imported, so a module never imported, and the
            source of one whose code is here, cost nothing but bytes.
        names: The names this finder serves (a bundle's main modules, or its fallbacks).
        entry: The module that runs as ``__main__``.
    """

    bundled = True
    """Marks a module as served from the bundle (``module.__spec__.loader.bundled``)."""

    def __init__(self, modules: dict[str, Any], codes: dict[str, Any], names: Any, entry: str) -> None:
        self._modules = modules
        self._codes = codes
        self._names = frozenset(names)
        self._entry = entry

    def _name(self, fullname: str) -> str:
        return self._entry if fullname == "__main__" else fullname

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if fullname not in self._names:
            return None
        is_package, filename, _source = self._modules[fullname]
        spec = ModuleSpec(fullname, self, origin=filename, is_package=is_package)
        spec.has_location = True
        return spec

    def create_module(self, spec: ModuleSpec) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        exec(self.get_code(module.__name__), module.__dict__)  # noqa: S102 - the shipped bundle's own code

    def get_code(self, fullname: str) -> Any:
        name = self._name(fullname)
        packed = self._codes.pop(name, None)
        if packed is not None:
            return marshal.loads(zlib.decompress(packed))  # noqa: S302 - the client's own bytes
        _is_package, filename, source = self._modules[name]
        return compile(zlib.decompress(source), filename, "exec", dont_inherit=True)

    def get_source(self, fullname: str) -> str | None:
        found = self._modules.get(self._name(fullname))
        return None if found is None else zlib.decompress(found[2]).decode("utf-8", "replace")

    def get_filename(self, fullname: str) -> str:
        return self._modules[self._name(fullname)][1]

    def is_package(self, fullname: str) -> bool:
        return bool(self._modules[self._name(fullname)][0])


def this_magic() -> str:
    """This python's bytecode magic number in hex, as ``importlib.util.MAGIC_NUMBER.hex()`` says it."""
    magic = getattr(sys.modules.get("_frozen_importlib_external"), "MAGIC_NUMBER", b"")
    return bytes(magic).hex()


def install(bundle: tuple, codes: dict[str, Any]) -> BundleFinder:
    """Put the finders of ``bundle`` (entry, modules, fallback names) on ``sys.meta_path``."""
    entry, modules, fallbacks = bundle
    main = BundleFinder(modules, codes, [name for name in modules if name not in fallbacks], entry)
    sys.meta_path.insert(0, main)
    if fallbacks:
        sys.meta_path.append(BundleFinder(modules, codes, fallbacks, entry))
    return main


def show_traceback(kind: Any, value: Any, traceback: Any) -> None:
    """``sys.excepthook`` that shows the source lines of shipped modules too.

    The interpreter's own hook reads lines from files; the ``traceback`` module asks the module's loader.
    """
    import traceback as tracebacks

    sys.stderr.write("".join(tracebacks.format_exception(kind, value, traceback)))


def run_entry(finder: BundleFinder, entry: str) -> None:
    """Run ``entry`` as ``__main__``, as ``python -m`` would."""
    spec = finder.find_spec(entry)
    if spec is None:
        raise ImportError(f"the bundle has no module {entry}")
    main = type(sys)("__main__")
    main.__spec__ = spec
    main.__loader__ = finder
    main.__file__ = spec.origin
    main.__package__ = entry if spec.submodule_search_locations is not None else entry.rpartition(".")[0]
    sys.modules["__main__"] = main
    sys.excepthook = show_traceback
    exec(finder.get_code(entry), main.__dict__)  # noqa: S102 - the shipped bundle's own code


def boot(stream: BinaryIO, source_size: int, code_size: int, magic: str) -> None:
    """Read the bundle from ``stream``, serve its modules, run its entry (whose exit is the process's).

    The cyclic garbage collector is off from here: the start makes tens of thousands of objects that live
    until exit (modules, functions, classes, ctypes structures), which it would rescan several times over
    while they are made. The entry turns it back on once it runs (``serve.collect_from_now``).
    """
    gc.disable()
    bundle = marshal.loads(stream.read(source_size))  # noqa: S302 - the client's own bytes
    code_part = stream.read(code_size)
    codes: dict[str, Any] = {}
    if code_part and magic == this_magic():
        codes = marshal.loads(code_part)  # noqa: S302 - compiled for this very python
    run_entry(install(bundle, codes), bundle[0])
