"""Shared by every test: how to run the real `opsctl` binary.

Area fixtures live in each area's own conftest.py; the simulated-cluster fixtures (`sim4`,
`sim_factory`) are in tests/integration/conftest.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def _opsctl_bin() -> str:
    # Prefer the entry point next to the interpreter running the tests (the venv's), then PATH.
    candidate = Path(sys.executable).parent / "opsctl"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("opsctl")
    if found is None:
        raise RuntimeError("the opsctl entry point is not installed (run scripts/bootstrap.sh)")
    return found


@pytest.fixture(scope="session")
def opsctl_bin() -> str:
    return _opsctl_bin()


RunOpsctl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def run_opsctl(opsctl_bin: str) -> RunOpsctl:
    """Run the real `opsctl` binary: run_opsctl("nodes", "--json", env={...})."""

    def run(
        *args: str, env: Mapping[str, str] | None = None, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        full_env = dict(os.environ)
        full_env.pop("OPSCTL_CONFIG", None)  # tests say which cluster they mean
        full_env.update(env or {})
        return subprocess.run([opsctl_bin, *args], capture_output=True, text=True, env=full_env,
                              timeout=timeout, check=False)

    return run


def pytest_collection_finish(session: pytest.Session) -> None:
    # The hw_facts unit tests load Ansible modules in-process, and importing
    # ansible.module_utils replaces sys.intern with a patch object; torch._dynamo, imported lazily
    # by the training tests, then refuses to register its substitute for sys.intern. Importing
    # dynamo before any test runs (only when the collected tests already imported torch) makes the
    # outcome independent of test order.
    if "torch" in sys.modules:
        import torch
        import torch._dynamo

        # A worker shares the cores with the others (and with the jobs the tests start): torch's
        # default of a thread per core would spin against them. Subprocesses keep their own setting.
        if os.environ.get("PYTEST_XDIST_WORKER"):
            torch.set_num_threads(1)


# The lab modules share one lab (tests/integration/lab/conftest.py) and run in this order: the
# guide's shadow/apply steps first, since their remediation service must find a lab with no fault
# history (an XID the lab heals without a reboot stays in Prometheus's window for an hour, and the
# service rightly drains on it); the monitoring module before any other lab test puts an XID on
# record; the rolling update (reboots, another driver package) last but one; the teardown last.
LAB_MODULES = (
    "test_lab_guide.py",
    "test_lab_monitoring.py",
    "test_lab_machines.py",
    "test_lab_fabric.py",
    "test_lab_lifecycle.py",
    "test_lab_teardown.py",
)
LAB_DIR = "tests/integration/lab/"


def run_order(nodeid: str) -> tuple[int, int]:
    """Lab tests first, in LAB_MODULES order (a new lab module goes before the lifecycle one), then
    the rest as collected: the lab is the longest unit of work and starts at once on one worker."""
    path = nodeid.split("::", 1)[0]
    if not path.startswith(LAB_DIR):
        return (1, 0)
    name = path[len(LAB_DIR):]
    rank = LAB_MODULES.index(name if name in LAB_MODULES else "test_lab_lifecycle.py")
    return (0, 2 * rank - (name not in LAB_MODULES))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: run_order(item.nodeid))  # stable: collection order otherwise


def xdist_scope(nodeid: str) -> str:
    """The unit pytest-xdist schedules together (`make test`, `make check`): a test module, so its
    module-scoped clusters and Ansible renders are built once on one worker; and every lab module
    as one, since labs share the bridge and its addresses and must run one after another."""
    path = nodeid.split("::", 1)[0]
    return "lab" if path.startswith(LAB_DIR) else path


# Modules that spend their time waiting on daemons (scrape intervals, alert timers, SlurmdTimeout,
# Slurm's requeue delay), not computing: each used under a fifth of a core alone (docs/benchmarks.md,
# "Test suite"). They run on a worker of their own, one more than the cores, so that their waits
# overlap the computing modules instead of holding a core's worker idle. A module that starts a
# training job or Ansible belongs with the computing ones: a third busy worker slowed the lab.
WAITING_MODULES = tuple(f"tests/integration/{m}.py" for m in (
    "health/test_cli", "health/test_lustre_over_ssh", "health/test_prometheus_source",
    "health/test_remediation_sim", "health/test_ssh_source",
    "hwsim/test_alerting", "hwsim/test_counters_contract", "hwsim/test_health_on_sim",
    "hwsim/test_monitoring",
    "preflight/test_fabric_over_ssh", "preflight/test_preflight_over_ssh",
    "remediation/test_alertmanager_client", "remediation/test_alerts_outlive_a_slow_pass",
    "remediation/test_service_on_sim",
    "slurm/test_cli_commands", "slurm/test_contract", "slurm/test_sim",
))


def waits(scope: str) -> bool:
    return scope in WAITING_MODULES


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    # `-n auto`: a worker per core for the computing modules, one more for the waiting ones
    # (PYTEST_XDIST_AUTO_NUM_WORKERS still says exactly how many)
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + 1


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    # pytest 9 keeps a node's id where xdist's --dist loadgroup cannot rename it, so the grouping
    # is a scheduler of our own: xdist's module scheduling with the lab modules as one scope, and
    # two lanes when there are three workers or more.
    from xdist.scheduler import LoadScopeScheduling

    # Scopes in collection order (run_order), not xdist's largest-count-first: the lab, which
    # holds few tests but most of the time, starts first; integration modules come before unit ones.
    config.option.loadscopereorder = False

    class ModuleScheduling(LoadScopeScheduling):
        """The last worker (with three or more) takes only WAITING_MODULES; the others take the
        rest first and waiting modules once nothing else is left."""

        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

        def _waiting_worker(self, node: Any) -> bool:
            nodes = list(self.nodes)
            return len(nodes) >= 3 and node is nodes[-1]

        def _next_scope(self, node: Any) -> str | None:
            if self._waiting_worker(node):
                return next((s for s in self.workqueue if waits(s)), None)
            return next((s for s in self.workqueue if not waits(s)), next(iter(self.workqueue), None))

        def _assign_work_unit(self, node: Any) -> None:
            scope = self._next_scope(node)
            if scope is None:
                return
            work_unit = self.workqueue.pop(scope)
            self.assigned_work.setdefault(node, {})[scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some([collection.index(i) for i, done in work_unit.items() if not done])

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if self._next_scope(node) is None:
                node.shutdown()  # nothing left it may take: it stops once what it holds has run
                return
            if self._pending_of(self.assigned_work[node]) > 2:
                return
            self._assign_work_unit(node)

    return ModuleScheduling(config, log)
