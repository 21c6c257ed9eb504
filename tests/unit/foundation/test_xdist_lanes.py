"""The suite's xdist scheduler (tests/conftest.py): with three workers or more the last one runs the
modules that wait on daemons, then computing modules from the far end of the queue (never the lab);
the others run the computing modules first and the waiting ones once nothing else is left; with
fewer workers it is plain module scheduling. Driven here with
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
    assert nodes[-1].ran[:2] == [f"{WAIT}::test_c", f"{WAIT}::test_d"]
    assert WAIT not in modules(nodes[0]) | modules(nodes[1])
    assert sorted(t for n in nodes for t in n.ran) == sorted(COLLECTION)
    assert modules(nodes[0]) >= {LAB}  # the lab starts first, on the first worker


def test_the_waiting_lane_then_takes_computing_modules_from_the_end_but_never_the_lab() -> None:
    # the lab is the queue's only scope left when the waiting worker asks: it stays queued
    config: Any = SimpleNamespace(option=SimpleNamespace(loadscopereorder=True),
                                  getvalue=lambda name: ["3*popen"])
    sched = suite.pytest_xdist_make_scheduler(config, None)
    waiting = Worker("gw2")
    for node in (Worker("gw0"), Worker("gw1"), waiting):
        sched.add_node(node)
    sched.workqueue.update({"lab": {}, BUSY: {}, UNIT: {}})
    assert sched._next_scope(waiting) == UNIT
    sched.workqueue.pop(UNIT)
    assert sched._next_scope(waiting) == BUSY
    sched.workqueue.pop(BUSY)
    assert sched._next_scope(waiting) is None


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


def test_the_long_modules_come_after_the_lab_and_before_the_rest() -> None:
    order = sorted([f"{UNIT}::a", f"{suite.LONG_MODULES[1]}::b", f"{LAB}::c", f"{suite.LONG_MODULES[0]}::d"],
                   key=suite.run_order)
    assert order == [f"{LAB}::c", f"{suite.LONG_MODULES[0]}::d", f"{suite.LONG_MODULES[1]}::b", f"{UNIT}::a"]
    missing = [m for m in suite.LONG_MODULES if not (suite.REPO_ROOT / m).is_file()]
    assert not missing, f"LONG_MODULES lists modules that are gone: {missing}"
