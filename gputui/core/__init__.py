"""Plain data and pure rules shared by every front end: no textual or rich imports.

Concept packages, each with a face (``__init__``, ``__all__``) that loads nothing until a name is used; which
may import which is an import-linter contract (``pyproject.toml``), from the top down:

* ``fleet``, ``actions``: many hosts through Prometheus; kills and resets planned for the collector;
* ``verdict``: THE engine, from a host sample to its findings and clean-slate verdict, and their wording;
* ``servers``, ``store``: inference endpoints; the files gputui keeps and the one safe opener;
* ``link``, ``jobs``: how a host is reached; the process forest of a sample;
* ``model``: the host sample and its records;
* ``text``: machine text made safe, figures and command lines as they read.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


def lazy_face(package: str, homes: dict[str, str]) -> Callable[[str], object]:
    """A face's module ``__getattr__``: each name loads the module of ``package`` that ``homes`` says defines
    it, on first use, and is kept on the package from then on."""
    import sys

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(__import__(f"{package}.{home}", fromlist=[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
