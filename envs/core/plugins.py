"""User plug-ins: modules a config names under ``plugins:``, imported before the config's names are checked.

A plug-in module registers what it brings — a signal (``agents.signals.base.register_signal``), a trigger
(``policies.triggers.TRIGGERS``), a reward cost (``envs.costs.COSTS``), a retriever, a query mode, a bench
method kind … — when it is imported. Naming it in a config::

    plugins: [mypkg.signals]          # a train, bench, RSUS-fit, QueryGen or suite config — or its env
    env_config:
      signals: [output, my_signal]    # now a registered name

imports it on the driver before the config is validated (a module that does not import is a
:class:`~envs.core.config_files.ConfigError` naming the key and the module), and the config's env carries the list
(``EnvConfig.plugins``) to every process that rebuilds it with ``EnvConfig.from_dict``: Ray EnvRunners,
warm-start workers, the reasoner and retriever services.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable

__all__ = ["import_plugins", "imported_plugins"]

_IMPORTED: list[str] = []


def import_plugins(modules: Iterable[str] | None, where: str = "plugins",
                   error: type[Exception] = ValueError) -> list[str]:
    """Import each module of ``modules`` (once per process); returns them as a list.

    Raises:
        error: (a config passes its ``ConfigError``) ``modules`` is not a list of module names, or one does not
            import — naming ``where`` and the module, with the import error.
    """
    if modules is None:
        return []
    if isinstance(modules, str) or not isinstance(modules, (list, tuple)):
        raise error(f"{where}: expected a list of module names (e.g. [mypkg.signals]), got {modules!r}")
    out = []
    for mod in modules:
        if not isinstance(mod, str) or not mod or ":" in mod:
            raise error(f"{where}: a plug-in is a module name 'package.module', got {mod!r}")
        if mod not in sys.modules or mod not in _IMPORTED:
            try:
                importlib.import_module(mod)
            except ImportError as e:
                raise error(f"{where}: cannot import plug-in module '{mod}' ({e}); is its package on "
                                  "PYTHONPATH (or installed) in this process?") from e
            if mod not in _IMPORTED:
                _IMPORTED.append(mod)
        out.append(mod)
    return out


def imported_plugins() -> list[str]:
    """The plug-in modules this process imported, in order."""
    return list(_IMPORTED)
