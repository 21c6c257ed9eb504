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
