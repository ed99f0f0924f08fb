"""Public names of a package that load on first use (PEP 562): ``hpcsolve`` and ``hpcsolve.fem`` name entry points
whose modules import NumPy, SciPy and the solver families; ``import hpcsolve`` stays as cheap as before."""

from __future__ import annotations

import importlib


def lazy_attributes(package: str, table: dict[str, tuple[str, str]], namespace: dict):
    """(``__getattr__``, ``__dir__``) for the package ``package`` whose module namespace is ``namespace``: a name in
    ``table`` (name -> (module, attribute)) is imported on first use and kept in the namespace, so the package's
    name *is* the module's object (help() shows its real signature); ``__dir__`` lists ``__all__`` as well."""

    def __getattr__(name: str):
        if name in table:
            module, attr = table[name]
            value = getattr(importlib.import_module(module), attr)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return __getattr__, __dir__
