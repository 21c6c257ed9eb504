import json
import urllib.request
from pathlib import Path

from training.metrics import Metrics, read_metrics
from training.rundir import RunDir


def test_metrics_reach_jsonl_and_prometheus(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    m = Metrics(run, "orchestrator", port=0)
    try:
        m.log({"step": 3, "reward_mean_arithmetic": 0.5, "off_policy_lag_hist": {"1": 4}})
        m.lag.observe(1)
        m.count("stale_groups_dropped", 2)
        assert read_metrics(run.metrics)[0]["off_policy_lag_hist"] == {"1": 4}
        url = json.loads((run.peers / "metrics-orchestrator.json").read_text())["url"]
        body = urllib.request.urlopen(url, timeout=10).read().decode()
        assert 'opsctl_train_reward_mean_arithmetic{component="orchestrator"} 0.5' in body
        assert 'opsctl_train_off_policy_lag_steps_bucket{le="1.0"} 1.0' in body
        assert "opsctl_train_stale_groups_dropped_total" in body
    finally:
        m.close()


def test_the_newest_committed_checkpoint_is_exported_with_its_time(tmp_path: Path) -> None:
    from training.fsutil import COMMITTED, publish_dir

    run = RunDir(tmp_path)
    m = Metrics(run, "trainer", port=0)
    try:
        url = json.loads((run.peers / "metrics-trainer.json").read_text())["url"]
        name = "opsctl_train_last_checkpoint_timestamp_seconds"
        assert f'{name}{{component="trainer"}}' not in urllib.request.urlopen(url, timeout=10).read().decode()
        for step in (2, 4):
            final = run.step(run.ckpt("trainer"), step)
            publish_dir(final, lambda p: (p / "state.pt").write_bytes(b""), COMMITTED)
        (run.ckpt("trainer") / "step_6").mkdir()  # being written: not committed, not counted
        committed = (run.step(run.ckpt("trainer"), 4) / COMMITTED).stat().st_mtime
        body = urllib.request.urlopen(url, timeout=10).read().decode()
        line = next(x for x in body.splitlines() if x.startswith(f'{name}{{component="trainer"}}'))
        assert float(line.split()[1]) == committed
    finally:
        m.close()


def test_padding_fraction_is_a_trainer_gauge_with_help(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    m = Metrics(run, "trainer", port=0)
    try:
        m.log({"step": 0, "padding_fraction": 0.25, "micro_batches": 3})
        url = json.loads((run.peers / "metrics-trainer.json").read_text())["url"]
        body = urllib.request.urlopen(url, timeout=10).read().decode()
        assert 'opsctl_train_padding_fraction{component="trainer"} 0.25' in body
        assert "# HELP opsctl_train_padding_fraction Pad tokens / all tokens" in body
        assert read_metrics(run.metrics)[0]["padding_fraction"] == 0.25
    finally:
        m.close()


def test_metrics_bound_to_every_address_announce_the_hostname_and_answer_on_it(tmp_path: Path) -> None:
    """A multi-node run's monitoring host scrapes the announced URL: with [metrics] host = 0.0.0.0
    it names this machine, not an address only this machine reaches."""
    import socket

    from training.config import JobConfig

    assert JobConfig().metrics.host == "127.0.0.1"  # nothing is exposed unless asked
    run = RunDir(tmp_path)
    m = Metrics(run, "trainer", port=0, host="0.0.0.0")
    try:
        m.log({"step": 7})
        url = json.loads((run.peers / "metrics-trainer.json").read_text())["url"]
        assert url == f"http://{socket.gethostname()}:{m.port}/metrics"
        body = urllib.request.urlopen(f"http://127.0.0.1:{m.port}/metrics", timeout=10).read().decode()
        assert 'opsctl_train_step{component="trainer"} 7.0' in body
    finally:
        m.close()


def test_an_environment_name_that_is_no_metric_name_is_served_in_the_classic_form(tmp_path: Path) -> None:
    """verifiers environments are named "vf:<id>": their keys keep the name in metrics.jsonl, and
    their gauges carry it with every character a metric name may not hold as "_"."""
    import shutil
    import subprocess

    run = RunDir(tmp_path)
    m = Metrics(run, "orchestrator", port=0)
    try:
        m.log({"step": 0, "reward_mean_vf:vf-arithmetic": 0.25, "turns_mean_vf:vf-arithmetic": 2.0})
        assert read_metrics(run.metrics)[0]["reward_mean_vf:vf-arithmetic"] == 0.25
        url = json.loads((run.peers / "metrics-orchestrator.json").read_text())["url"]
        body = urllib.request.urlopen(url, timeout=10).read().decode()
        assert 'opsctl_train_reward_mean_vf_vf_arithmetic{component="orchestrator"} 0.25' in body
        assert 'opsctl_train_turns_mean_vf_vf_arithmetic{component="orchestrator"} 2.0' in body
        assert '{"' not in body  # no quoted (UTF-8) metric names
        if shutil.which("promtool"):  # Prometheus's own parser, as the scrape reads it
            done = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True,
                                  text=True, timeout=30, check=False)
            assert "error while linting" not in done.stdout + done.stderr, done.stdout + done.stderr
    finally:
        m.close()
