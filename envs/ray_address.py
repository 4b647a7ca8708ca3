"""Which Ray cluster a command joins, and a deadline on reaching it — the one rule of ``python -m train`` and
``kairos serve``.

An address given on the command line or in the config (``kairos serve --ray-address``), else the ``RAY_ADDRESS``
environment variable (what ``ray job submit`` sets), is a running cluster to join — as every Ray tool does; neither
given, the command starts a private local cluster. Before ``ray.init`` the cluster's port is probed with a TCP
connect of a few seconds (``KAIROS_RAY_CONNECT_TIMEOUT_S``, default 5): nothing listening is one line naming the
address, where it came from and the fix, not minutes of Ray's own retries.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)

#: the environment variable every Ray tool reads the cluster address from
ENV = "RAY_ADDRESS"
#: the environment variable of the connect deadline (seconds)
TIMEOUT_ENV = "KAIROS_RAY_CONNECT_TIMEOUT_S"
#: the connect deadline when TIMEOUT_ENV is unset (seconds)
DEFAULT_TIMEOUT_S = 5.0


class RayUnreachableError(ConnectionError):
    """Nothing answers at the Ray address a command was told to join (a ``ConnectionError``: every CLI prints it as
    its one error line)."""


def address_to_join(given: str | None = None, given_as: str = "--ray-address") -> tuple[str, str] | None:
    """``(address, where it came from)`` of the cluster to join: ``given`` (named ``given_as``), else
    ``RAY_ADDRESS``; ``None``: start a local cluster (neither set, or ``local``)."""
    if given and given != "local":
        return given, given_as
    env = os.environ.get(ENV, "").strip()
    if env and env != "local":
        return env, f"the {ENV} environment variable"
    return None


def _host_port(address: str) -> tuple[str, int] | None:
    """Host and port of a Ray address (``host:port``, ``ray://host[:port]``); ``None`` for ``auto`` (Ray looks the
    local cluster up itself, and says at once when none runs)."""
    if address == "auto":
        return None
    rest = address.split("://", 1)[-1].rstrip("/")
    default = 10001 if address.startswith("ray://") else 6379  # Ray Client's port, the GCS's
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return rest, default
    return host.strip("[]"), int(port)


def seconds_from_env(name: str, default: float) -> float:
    """The seconds > 0 the environment variable ``name`` holds, else ``default``; another value is a one-line
    ``ValueError``."""
    text = os.environ.get(name, "").strip()
    try:
        value = float(text) if text else default
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{name}={text!r}: expected seconds > 0 (e.g. {default:g})")
    return value


def check_reachable(address: str, source: str, timeout_s: float | None = None) -> None:
    """A TCP connect to ``address`` within ``timeout_s`` (default: ``KAIROS_RAY_CONNECT_TIMEOUT_S``, else 5), else a
    :class:`RayUnreachableError` naming the address, its ``source`` and the fix."""
    target = _host_port(address)
    if target is None:
        return
    timeout_s = seconds_from_env(TIMEOUT_ENV, DEFAULT_TIMEOUT_S) if timeout_s is None else timeout_s
    try:
        with socket.create_connection(target, timeout=timeout_s):
            pass
    except OSError as e:
        cause = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e) or type(e).__name__).lower()
        undo = f"unset {ENV}" if source.startswith("the ") else f"drop {source}"
        raise RayUnreachableError(
            f"no Ray cluster at {address} (from {source}): {cause} within {timeout_s:g} s; start it (ray start "
            f"--head --port {target[1]}) or {undo} to start a local one") from None


def joined_address(given: str | None = None, given_as: str = "--ray-address") -> str | None:
    """The address of the cluster to join (:func:`address_to_join`), checked reachable; ``None``: start a local
    one."""
    found = address_to_join(given, given_as)
    if found is None:
        return None
    check_reachable(*found)
    log.info("joining the Ray cluster at %s (from %s)", *found)
    return found[0]
