"""The suite's xdist scheduler (tests/conftest.py): with three workers or more the last one runs only
the modules that wait on daemons, the others run the computing modules first and the waiting ones
once nothing else is left; with fewer workers it is plain module scheduling. Driven here with
stand-in workers, as pytest-xdist's controller drives it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

# tests/conftest.py by its path: several conftest modules share the name
_spec = importlib.util.spec_from_file_location("suite_conftest", Path(__file__).parents[2] / "conftest.py")
assert _spec and _spec.loader
suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite)

WAIT = suite.WAITING_MODULES[0]
LAB = suite.LAB_DIR + "test_lab_guide.py"
BUSY = "tests/integration/training/test_rl_learns.py"
UNIT = "tests/unit/foundation/test_nodeset.py"
COLLECTION = [f"{LAB}::test_a", f"{BUSY}::test_b", f"{WAIT}::test_c", f"{WAIT}::test_d",
              f"{UNIT}::test_e", f"{UNIT}::test_f"]


class Worker:
    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.queue: list[int] = []
        self.ran: list[str] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.queue.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def run(workers: int) -> list[Worker]:
    config: Any = SimpleNamespace(option=SimpleNamespace(loadscopereorder=True),
                                  getvalue=lambda name: [f"{workers}*popen"])
    sched = suite.pytest_xdist_make_scheduler(config, None)
    nodes = [Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, COLLECTION)
    sched.schedule()
    # each worker runs its queue one test at a time, in turns, as the controller hears of them
    while any(n.queue for n in nodes):
        for node in nodes:
            if node.queue:
                index = node.queue.pop(0)
                node.ran.append(COLLECTION[index])
                sched.mark_test_complete(node, index)
    assert sched.tests_finished and all(n.shutting_down for n in nodes)
    return nodes


def modules(worker: Worker) -> set[str]:
    return {nodeid.split("::")[0] for nodeid in worker.ran}


def test_three_workers_give_the_waiting_modules_a_lane_of_their_own() -> None:
    nodes = run(3)
    assert modules(nodes[-1]) == {WAIT}
    assert WAIT not in modules(nodes[0]) | modules(nodes[1])
    assert sorted(t for n in nodes for t in n.ran) == sorted(COLLECTION)
    assert modules(nodes[0]) >= {LAB}  # the lab starts first, on the first worker


def test_two_workers_schedule_every_module_on_either() -> None:
    nodes = run(2)
    assert sorted(t for n in nodes for t in n.ran) == sorted(COLLECTION)
    assert any(WAIT in modules(n) for n in nodes)


def test_waiting_modules_exist() -> None:
    missing = [m for m in suite.WAITING_MODULES if not (suite.REPO_ROOT / m).is_file()]
    assert not missing, f"WAITING_MODULES lists modules that are gone: {missing}"


@pytest.mark.parametrize("nodeid", [f"{LAB}::x", f"{suite.LAB_DIR}test_lab_fabric.py::y"])
def test_every_lab_module_is_one_scope(nodeid: str) -> None:
    assert suite.xdist_scope(nodeid) == "lab"
