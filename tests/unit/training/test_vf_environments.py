"""verifiers environments as the job loads and checks them (training/envs/verifiers_env.py,
python -m training.envs.check) and their rollouts as training samples and failover signals
(training/orchestrator/vf_rollouts.py)."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from training.envs.check import main as check_main
from training.envs.verifiers_env import EnvLoadError, load
from training.inference.client import CancelHandle, RequestCancelled, ServerError
from training.orchestrator.batch import to_samples
from training.orchestrator.failover import transient
from training.orchestrator.vf_rollouts import (
    VerifiersRollouts,
    VfOutput,
    env_metrics,
    server_failure,
    to_group,
)

vf = pytest.importorskip("verifiers")  # the training extra
Capture = pytest.CaptureFixture[str]
ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "environments" / "vf_arithmetic"

BROKEN_RUBRIC = '''
import verifiers as vf
from datasets import Dataset

def picky(completion, answer, **_):
    if answer == "3":
        raise KeyError("no score for 3")
    return 1.0

def load_environment():
    rows = [{"prompt": [{"role": "user", "content": f"{a}+1="}], "answer": str(a + 1)} for a in range(4)]
    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[picky]))
'''


REMOTE_SANDBOX = '''
import verifiers as vf
from datasets import Dataset

def load_environment():
    rows = [{"prompt": [{"role": "user", "content": "print 1"}], "answer": "1"}]
    return vf.PythonEnv(dataset=Dataset.from_list(rows))
'''


def check(capsys: Capture, name: str, *args: str) -> tuple[int, str]:
    code = check_main(["--name", name, *args])
    return code, capsys.readouterr().out.strip()


def test_the_shipped_package_loads_and_its_reference_answers_score(capsys: Capture) -> None:
    code, line = check(capsys, "vf:vf-arithmetic", "--path", str(PACKAGE))
    assert code == 0, line
    assert line == "env vf:vf-arithmetic: 40 training rows, 10 held-out, 4 reference answers scored"
    env = load("vf:vf-arithmetic", {"num_train": 6}, [PACKAGE])
    assert [t.id for t in env.dataset] == [f"vf-arithmetic:{i}" for i in range(6)]
    assert env.rows[0]["prompt"][-1]["role"] == "user" and env.stop_sequences == ()


@pytest.mark.parametrize(("name", "kwargs", "module", "expected"), [
    ("vf:no-such-env", "{}", None,
     "env vf:no-such-env: not installed or not importable (No module named 'no_such_env')"),
    ("vf:no-loader", "{}", "X = 1\n", "env vf:no-loader: its module has no load_environment()"),
    ("vf:vf-arithmetic", '{"level": 3}', None,
     "env vf:vf-arithmetic: env.kwargs do not fit its load_environment(): "
     "load_environment() got an unexpected keyword argument 'level'"),
    ("vf:vf-arithmetic", '{"digits": 9}', None,
     "env vf:vf-arithmetic: vf-arithmetic: digits must be in 1..6"),
    ("vf:picky", "{}", BROKEN_RUBRIC,
     "env vf:picky: 1 of 4 reference answers raised in the rubric; first: Error calling reward function "
     "picky: 'no score for 3'"),
    ("vf:not-env", "{}", "def load_environment():\n    return {}\n",
     "env vf:not-env: load_environment() returned dict, not a verifiers Environment"),
    ("vf:v1-env", "{}", "from verifiers.v1 import SingleAgentEnv\n\nclass V1Env(SingleAgentEnv):\n    pass\n",
     "env vf:v1-env: verifiers.v1 environments are not supported: their harnesses install uv and their "
     "programs' dependencies from a package index at run time (docs/training.md)"),
    ("vf:mixed", '{"level": 3}',
     "from verifiers.v1 import SingleAgentEnv\n\ndef load_environment():\n    pass\n",
     "env vf:mixed: env.kwargs do not fit its load_environment(): "
     "load_environment() got an unexpected keyword argument 'level'"),  # a v1 import is not the reason
    ("vf:", "{}", None, "env.name 'vf:': give the environment's id after 'vf:'"),
    ("vf:vf-arithmetic", "[1]", None, "env.kwargs: not a JSON object"),
])
def test_a_malformed_environment_is_one_line_and_exit_2(
    capsys: Capture, tmp_path: Path, name: str, kwargs: str, module: str | None, expected: str
) -> None:
    if module is not None:
        (tmp_path / f"{name[3:].replace('-', '_')}.py").write_text(module)
    code, line = check(capsys, name, "--kwargs", kwargs, "--path", str(tmp_path), "--path", str(PACKAGE))
    assert (code, line) == (2, f"error: {expected}")


def test_a_remote_sandbox_environment_is_refused_in_one_line(tmp_path: Path) -> None:
    """As `opsctl launch` runs the check: a process of its own, whose exit handlers (a half-built
    PythonEnv registers one that raises) cannot blur the verdict."""
    (tmp_path / "remote_code.py").write_text(REMOTE_SANDBOX)
    done = subprocess.run([sys.executable, "-m", "training.envs.check", "--name", "vf:remote-code",
                           "--path", str(tmp_path)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stdout.splitlines() == [
        "error: env vf:remote-code: it is a verifiers SandboxEnv or PythonEnv, which runs code in Prime's "
        "remote sandbox service; run model code with training.sandbox in the reward instead"]


def test_the_check_can_be_skipped_but_loading_cannot(capsys: Capture, tmp_path: Path) -> None:
    (tmp_path / "picky.py").write_text(BROKEN_RUBRIC)
    assert check(capsys, "vf:picky", "--path", str(tmp_path), "--examples", "0")[0] == 0
    with pytest.raises(EnvLoadError):
        load("vf:picky", {"extra": 1}, [tmp_path])


def turn(prompt: list[int], completion: list[int], lp: float = -0.5) -> dict[str, object]:
    return {"tokens": {"prompt_ids": prompt, "completion_ids": completion,
                       "completion_logprobs": [lp] * len(completion)}}


def test_a_groups_samples_train_exactly_the_sampled_tokens() -> None:
    merged = [turn([1, 2], [3, 4]), turn([1, 2, 3, 4, 9, 9], [5])]  # the tool's 9 9 between the turns
    split = [turn([1, 2], [3]), turn([7, 7], [8])]  # the template re-rendered: a new sample
    outs = [VfOutput(1.0, {"r": 1.0}, merged, False, None, 2), VfOutput(0.0, {}, split, False, None, 2),
            VfOutput(0.0, {}, [turn([1], [6])], False, "ToolCallError -> ValueError", 1),
            VfOutput(0.0, {}, [], False, "ModelError", 0)]
    group = to_group("t:0", 0, outs, version=3, normalize_std=False)
    assert [r.advantage for r in group.rollouts] == [0.75, -0.25, -0.25, -0.25]
    assert group.rollouts[0].prompt == [1, 2] and group.rollouts[0].completion == [3, 4]
    samples = to_samples([group], step=3, max_off_policy_steps=1)
    assert [s.input_ids for s in samples] == [[1, 2, 3, 4, 9, 9, 5], [1, 2, 3], [7, 7, 8], [1, 6]]
    assert [s.loss_mask for s in samples] == [[0, 0, 1, 1, 0, 0, 1], [0, 0, 1], [0, 0, 1], [0, 0]]
    assert samples[0].logprobs == [0, 0, -0.5, -0.5, 0, 0, -0.5]
    assert samples[0].advantages == [0, 0, 0.75, 0.75, 0, 0, 0.75]
    # Too stale for the batch: kept as context, trained on nothing.
    assert all(sum(s.loss_mask) == 0 for s in to_samples([group], step=5, max_off_policy_steps=1))

    metrics = env_metrics("vf:t", [group], reward_fn_errors=1)
    assert metrics == {"turns_mean_vf:t": 1.25, "turns_max_vf:t": 2.0, "sampled_tokens_mean_vf:t": 1.5,
                       "truncated_fraction_vf:t": 0.0, "samples_per_rollout_vf:t": 4 / 3,
                       "env_errors_vf:t": 2.0, "reward_fn_errors_total_vf:t": 1.0, "r_mean_vf:t": 0.25}


class _Answer503(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # the http.server API's name
        body = json.dumps({"error": {"message": "loading", "type": "ServiceUnavailable"}}).encode()
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


class _Slow(_Answer503):
    def do_POST(self) -> None:
        threading.Event().wait(30)


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def answers_503() -> Iterator[str]:
    yield from _serve(_Answer503)


@pytest.fixture
def never_answers() -> Iterator[str]:
    yield from _serve(_Slow)


class _EndsAtOnce(_Answer503):
    """A policy whose first sampled token ends its turn: no text, one token with its log-prob."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        choice = {"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop",
                  "token_ids": [0], "logprobs": {"content": [{"token": "token_id:0", "logprob": -0.25,
                                                             "bytes": None, "top_logprobs": []}]}}
        body = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "policy",
                           "choices": [choice], "prompt_token_ids": [5, 6, 7],
                           "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def ends_at_once() -> Iterator[str]:
    yield from _serve(_EndsAtOnce)


def test_a_reply_of_only_the_end_token_is_trained_not_an_error(ends_at_once: str) -> None:
    """verifiers would end it in EmptyModelResponseError, untrained: nothing would push the end
    token down, and a policy drifting towards it would collapse."""
    (group,) = runner().run(ends_at_once, [0])
    assert [o.error for o in group] == [None, None] and [o.reward for o in group] == [0.0, 0.0]
    samples = to_samples([to_group("t:0", 0, group, version=0, normalize_std=False)], step=0,
                         max_off_policy_steps=1)
    assert [(s.input_ids, s.loss_mask, s.logprobs) for s in samples] == [([5, 6, 7, 0], [0, 0, 0, 1],
                                                                         [0, 0, 0, -0.25])] * 2


def runner() -> VerifiersRollouts:
    return VerifiersRollouts(load("vf:vf-arithmetic", {"num_train": 4}, [PACKAGE]), "policy", 2, 4, 1.0, 5.0)


def test_a_server_that_does_not_answer_is_a_transient_failure_failover_retries(answers_503: str) -> None:
    run = runner()
    with pytest.raises(ServerError) as refused:
        run.run("http://127.0.0.1:9", [0])  # nothing listens on the discard port
    assert refused.value.status is None and transient(refused.value)
    with pytest.raises(ServerError) as busy:
        run.run(answers_503, [0, 1])
    assert busy.value.status == 503 and transient(busy.value)
    assert server_failure({"error": "ToolCallError", "message": "bad", "error_chain_repr": "",
                           "error_chain_str": "ToolCallError -> ValueError"}) is None


def test_a_cancelled_group_stops_at_once(never_answers: str) -> None:
    cancel = CancelHandle()
    threading.Timer(0.3, cancel.cancel).start()
    with pytest.raises(RequestCancelled):
        runner().run(never_answers, [0, 1, 2], cancel)


def test_an_evaluation_counts_the_rollouts_an_environment_error_ended() -> None:
    """They score as wrong answers, so an accuracy that fell must say how many there were."""
    from types import SimpleNamespace

    from training.config import EvalConfig
    from training.orchestrator.evaluation import evaluate_vf

    def out(reward: float, error: str | None = None) -> VfOutput:
        return VfOutput(reward=reward, metrics={}, trajectory=[], truncated=False, error=error, turns=1)

    env = SimpleNamespace(name="vf:x", eval_rows=[{"prompt": "a"}, {"prompt": "b"}])
    answers = [[out(1.0), out(0.0, "EmptyModelResponseError")], [out(1.0), out(0.0, "ModelError")]]
    result = evaluate_vf(env, EvalConfig(size=2, samples=2, pass_k=[1]), lambda rows, n, t: answers,  # type: ignore[arg-type]
                         step=3, loaded_version=3)
    assert result is not None and (result.accuracy, result.errors) == (0.5, 2)
    assert result.record()["eval_errors"] == 2
