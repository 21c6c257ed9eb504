"""The pure parts of the benches: /proc parsing, the soak's slope and verdict, the replayed
Prometheus answers, the emulation cost's arithmetic, the resumed-step search, the learning bench's
seeds, run reading and summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_learning import DEMO, LearningRun, env_seed_override, parse_seeds, read_run, summarise
from emulation_cost import group_of, per_minute
from failure_to_resume import first_after, trainer_times
from procstat import linear_fit, parse_stat_cpu_ticks, parse_status_rss_kib
from promreplay import Recording, shift_times
from soak_memory import Track, judge

# /proc/PID/stat of a process whose name holds a space and a ')': utime 1234, stime 56
STAT = ("4242 (py (x) y) S 1 4242 4242 0 -1 4194304 2000 0 0 0 1234 56 0 0 20 0 3 0 12345 "
        "100000000 2500 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0")


def test_stat_cpu_ticks_counted_after_the_last_parenthesis() -> None:
    assert parse_stat_cpu_ticks(STAT) == 1234 + 56


def test_status_rss() -> None:
    assert parse_status_rss_kib("Name:\tpython\nVmPeak:\t  9000 kB\nVmRSS:\t   81234 kB\n") == 81234
    assert parse_status_rss_kib("Name:\tkthreadd\nState:\tS (sleeping)\n") == 0


def test_linear_fit_recovers_a_line_and_refuses_a_point() -> None:
    line = linear_fit([0, 1, 2, 3], [10, 12, 14, 16])
    assert line.slope == pytest.approx(2.0) and line.intercept == pytest.approx(10.0)
    flat = linear_fit([0, 1, 2, 3], [5, 7, 5, 7])
    assert flat.slope == pytest.approx(0.4)
    with pytest.raises(ValueError):
        linear_fit([1, 1], [2, 3])
    with pytest.raises(ValueError):
        linear_fit([1, 2], [2])


def _track(rss: list[int], every_s: float = 30.0, cpu_per_sample: float = 0.5) -> Track:
    t = Track("p", 1)
    t.samples = [(i * every_s, r, i * cpu_per_sample) for i, r in enumerate(rss)]
    return t


def test_soak_verdict_ignores_warmup_growth_and_catches_a_leak() -> None:
    # 5 minutes of start-up growth, then flat with noise: passes
    warm = [40_000 + 2_000 * i for i in range(10)] + [60_000 + (i % 2) * 100 for i in range(50)]
    v = judge(_track(warm), warmup_s=300, max_slope=32)
    assert v.ok and v.start_kib == 40_000 and v.max_kib == 60_100 and abs(v.slope_kib_per_min) < 5
    assert v.cpu_s_per_min == pytest.approx(1.0)  # 0.5 s every 30 s
    # 64 KiB more every 30 s after the warm-up: 128 KiB/min, fails
    leak = warm[:10] + [60_000 + 64 * i for i in range(50)]
    bad = judge(_track(leak), warmup_s=300, max_slope=32)
    assert not bad.ok and bad.slope_kib_per_min == pytest.approx(128.0)


def test_soak_verdict_forgives_one_allocator_step_but_not_a_leak_in_steps() -> None:
    # Like the 20-minute rerun that failed (35.5 KiB/min): flat, one 512 KiB rise mid-window, flat
    flat = [39_000] * 10 + [39_300] * 14 + [39_812] * 16
    v = judge(_track(flat), warmup_s=300, max_slope=32)
    assert v.slope_kib_per_min > 32  # the plain slope would have failed it
    assert v.ok and v.step_kib == 512 and v.slope_without_step_kib_per_min == pytest.approx(0.0)
    # The same rise every 5 minutes is a leak: taking one out leaves the others
    periodic = [39_000 + 512 * (i // 10) for i in range(60)]
    bad = judge(_track(periodic), warmup_s=300, max_slope=32)
    assert not bad.ok and bad.step_kib == 512 and bad.slope_without_step_kib_per_min > 32
    # One rise beyond --max-step fails however flat the rest is
    jump = [39_000] * 20 + [60_000] * 40
    big = judge(_track(jump), warmup_s=300, max_slope=32, max_step=4096)
    assert not big.ok and big.step_kib == 21_000 and big.slope_without_step_kib_per_min == pytest.approx(0.0)


def test_soak_verdict_uses_every_sample_when_the_soak_is_shorter_than_the_warmup() -> None:
    v = judge(_track([100, 200, 300]), warmup_s=3600, max_slope=32)
    assert v.slope_kib_per_min == pytest.approx(200.0) and not v.ok


def test_shift_times_moves_values_and_keeps_the_original() -> None:
    body = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"node": "gpu-001", "gpu": "0"}, "value": [1000.5, "990.25"]}]}}
    moved = shift_times(body, 100.0)
    assert moved["data"]["result"][0]["value"] == [1100.5, "1090.25"]
    assert body["data"]["result"][0]["value"] == [1000.5, "990.25"]


def test_recording_answers_by_query_text_and_shifts_only_times(tmp_path: Path) -> None:
    fresh = {"data": {"result": [{"metric": {}, "value": [10.0, "9"]}]}}
    values = {"data": {"result": [{"metric": {}, "value": [10.0, "1700000000"]}]}}
    rec = Recording(10.0, 1, {"fresh": "timestamp(x)", "values": "max(y)"},
                    {"fresh": fresh, "values": values}, {"fresh": 0.1, "values": 0.2})
    rec.save(tmp_path / "r.json")
    back = Recording.load(tmp_path / "r.json")
    def value(query: str) -> list[object]:
        return list(json.loads(back.answer(query, 70.0) or b"")["data"]["result"][0]["value"])

    assert value("timestamp(x)") == [70.0, "69.0"]
    assert value("max(y)") == [10.0, "1700000000"]
    assert back.answer("up", 70.0) is None


def test_emulation_cost_arithmetic() -> None:
    assert group_of("slurmd-gpu-017") == "slurmd" and group_of("hwsim-exporter") == "hwsim-exporter"
    rates = per_minute({"a": 10.0, "b": 5.0, "gone": 1.0}, {"a": 13.0, "b": 4.0}, seconds=120)
    assert rates == {"a": pytest.approx(1.5)}  # b restarted (went back), "gone" exited


def test_first_step_of_the_resumed_attempt(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(
        "\n".join(json.dumps(r) for r in [
            {"component": "trainer", "step": 6, "time": 100.0},
            {"component": "orchestrator", "step": 7, "time": 101.0},
            {"component": "trainer", "step": 7, "time": 102.0},
            {"component": "trainer", "step": 6, "time": 150.0},
            {"component": "trainer", "step": 7, "time": 151.0},
        ]) + '\n{"component": "trainer", "st'  # a line still being written
    )
    times = trainer_times(metrics)
    assert times == [(100.0, 6), (102.0, 7), (150.0, 6), (151.0, 7)]
    assert first_after(times, 140.0) == (150.0, 6)
    assert first_after(times, 200.0) is None
    assert trainer_times(tmp_path / "missing.jsonl") == []


def test_learning_bench_seeds() -> None:
    assert parse_seeds("0-5") == [0, 1, 2, 3, 4, 5]
    assert parse_seeds("0-2,9") == [0, 1, 2, 9]
    assert parse_seeds("7") == [7]
    for bad in ("", "1,1", "3-1"):
        with pytest.raises(ValueError):
            parse_seeds(bad)


def test_learning_bench_reads_the_first_and_last_eval(tmp_path: Path) -> None:
    records = [
        {"component": "sft", "stage": "sft", "step": 0, "loss": 1.2},
        {"component": "orchestrator", "event": "eval", "step": 0, "eval_accuracy": 0.3},
        {"component": "orchestrator", "step": 0, "reward_mean_arithmetic": 0.3},
        {"component": "orchestrator", "event": "eval", "step": 600, "eval_accuracy": 0.75},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "sft" / "final").mkdir(parents=True)
    (tmp_path / "sft" / "final" / "STABLE").write_text(json.dumps({"steps": 650, "demos": 2000}))
    run = read_run(tmp_path, seed=3, load="loaded", wall_s=181.26)
    assert (run.sft_steps, run.before, run.after, run.rl_steps, run.wall_s) == (650, 0.3, 0.75, 600, 181.3)
    assert run.gain == pytest.approx(0.45)
    (tmp_path / "metrics.jsonl").write_text(json.dumps(records[1]) + "\n")
    with pytest.raises(ValueError, match="expected an eval at step 0 and one at the end"):
        read_run(tmp_path, seed=3, load="quiet", wall_s=1.0)


def test_learning_bench_summary_per_load_and_overall() -> None:
    def run(seed: int, load: str, gain: float) -> LearningRun:
        return LearningRun(seed, load, 600, 0.3, 0.3 + gain, 600, 100.0)

    runs = [run(0, "quiet", 0.4), run(1, "quiet", 0.5), run(2, "quiet", 0.6), run(0, "loaded", 0.35)]
    s = summarise(runs)
    assert s["quiet"] == {"runs": 3, "min": 0.4, "median": 0.5, "max": 0.6}
    assert s["loaded"] == {"runs": 1, "min": 0.35, "median": 0.35, "max": 0.35}
    assert s["all"]["runs"] == 4 and s["all"]["min"] == 0.35 and s["all"]["median"] == pytest.approx(0.45)


def test_learning_bench_env_seed_keeps_the_demos_other_arguments() -> None:
    import tomllib

    text = env_seed_override(7)
    assert text.startswith("env.kwargs=")
    parsed = tomllib.loads("v = " + text.split("=", 1)[1])["v"]
    demo = tomllib.loads(DEMO.read_text())
    assert parsed == {**demo["env"]["kwargs"], "seed": 7}

