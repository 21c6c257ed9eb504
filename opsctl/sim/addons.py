"""Extension point of the simulated cluster: add-ons started after Slurm is up and stopped before
it goes down (emulated exporters, Prometheus, fault injectors).

An add-on is any object with `name` and three methods taking the SimCluster:
`start(sim)`, `stop(sim)` and `status(sim) -> dict`. Start its daemons with `sim.spawn(...)` so that
`sim.down()` stops them even when the add-on's own `stop` is never reached. Register it by name:
add a line to `ADDONS` ("module:attr", imported only when used) or call `register_addon`. `attr`
is a class or factory called with no arguments.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from opsctl.errors import UsageError

if TYPE_CHECKING:
    from opsctl.sim.cluster import SimCluster


class SimAddon(Protocol):
    name: str

    def start(self, sim: SimCluster) -> None: ...

    def stop(self, sim: SimCluster) -> None: ...

    def status(self, sim: SimCluster) -> dict[str, Any]: ...


AddonFactory = Callable[[], SimAddon]

ADDONS: dict[str, str | AddonFactory] = {
    "monitoring": "opsctl.sim.monitoring:MonitoringAddon",
}


def register_addon(name: str, factory: AddonFactory) -> None:
    ADDONS[name] = factory


def load_addon(name: str) -> SimAddon:
    entry = ADDONS.get(name)
    if entry is None:
        raise UsageError(f"unknown sim add-on {name!r} (known: {', '.join(sorted(ADDONS))})")
    if isinstance(entry, str):
        module_name, _, attr = entry.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                raise UsageError(f"sim add-on {name!r} is not available (no module {module_name})") from None
            raise
        entry = getattr(module, attr)
    addon = entry()
    return addon
