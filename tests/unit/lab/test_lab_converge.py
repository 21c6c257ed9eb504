# ruff: noqa: E501 -- genuine PLAY RECAP lines are wider than our line limit
from opsctl.lab.converge import ConvergeResult, parse_recap

OUTPUT = """
PLAY [Monitoring] **************************************************************

TASK [prometheus : Install] ****************************************************
ok: [head]

PLAY RECAP *********************************************************************
gpu-001                    : ok=41   changed=0    unreachable=0    failed=0    skipped=12   rescued=0    ignored=0
gpu-002                    : ok=41   changed=3    unreachable=0    failed=1    skipped=12   rescued=0    ignored=0
head                       : ok=52   changed=0    unreachable=1    failed=0    skipped=9    rescued=1    ignored=2

Wednesday 02 December 2026  14:00:00 +0000 (0:00:01.234)       0:03:12.345 ******
"""


def test_recap_counts_per_host() -> None:
    recap = parse_recap(OUTPUT)
    assert set(recap) == {"gpu-001", "gpu-002", "head"}
    assert recap["gpu-002"].changed == 3 and recap["gpu-002"].failed == 1
    assert recap["head"].unreachable == 1 and recap["head"].ignored == 2 and recap["head"].ok == 52


def test_failed_and_changed_hosts() -> None:
    result = ConvergeResult(2, parse_recap(OUTPUT), OUTPUT)
    assert result.failed_hosts == ["gpu-002", "head"]
    assert result.changed_hosts == ["gpu-002"]


def test_the_last_recap_wins_and_missing_recap_is_empty() -> None:
    two = (
        OUTPUT
        + "\nPLAY RECAP ***\nhead : ok=1 changed=0 unreachable=0 failed=0 skipped=0 rescued=0 ignored=0\n"
    )
    assert set(parse_recap(two)) == {"head"}
    assert parse_recap("ERROR! the playbook: site.yml could not be found\n") == {}


RUN = """
TASK [slurm : Render slurm.conf] ***********************************************
ok: [gpu-001]
ok: [gpu-002]

TASK [slurm : Run slurmd] ******************************************************
ok: [gpu-002]
changed: [gpu-001]

RUNNING HANDLER [slurm : Restart slurmd] ***************************************
fatal: [gpu-002]: FAILED! => {"msg": "Unable to restart service slurmd"}

TASK [node_exporter : Run node exporter] ***************************************
skipping: [gpu-001]
"""


def test_report_names_each_task_that_changed_or_failed_and_only_those() -> None:
    result = ConvergeResult(2, parse_recap(RUN), RUN)
    lines = result.report(tail=0).split("\n--- last")[0].splitlines()
    assert lines == [
        "TASK [slurm : Run slurmd]",
        "  changed: [gpu-001]",
        "RUNNING HANDLER [slurm : Restart slurmd]",
        '  fatal: [gpu-002]: FAILED! => {"msg": "Unable to restart service slurmd"}',
    ]
    quiet = ConvergeResult(0, {}, "TASK [a : b] ***\nok: [h]\n")
    assert quiet.report(tail=10).startswith("(no task changed or failed)\n")
