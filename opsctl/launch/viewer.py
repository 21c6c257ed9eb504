"""`opsctl runs view`: what the run viewer shows, read from run directories only.

The page (opsctl/launch/viewer_assets/) is static HTML and JavaScript with no outside assets; the
data comes as `data.js` (`window.OPSCTL_RUNS = [...]`), a script rather than JSON so that the page
also works opened from disk (browsers refuse fetch() on file:// URLs). `view_data` reads only the
run directory, so it serves a live run as well as a finished one; whatever cannot be read becomes
a gap the page names instead of an error.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from opsctl.errors import OpsctlError
from opsctl.launch.ledger import LEDGER, load_ledger, read_attempts
from opsctl.launch.runs import summarize

ASSETS = Path(__file__).parent / "viewer_assets"
REWARD_PREFIX = "reward_mean_"


@dataclass
class RunView:
    run_id: str
    run_dir: str
    launcher: str  # "slurm" (a ledger) or "local"
    state: str
    steps: int | None
    steps_done: int | None
    rewards: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # env -> [{step, time, value}]
    evals: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # env -> [eval records]
    attempts: list[dict[str, Any]] = field(default_factory=list)
    remediations: list[dict[str, Any]] = field(default_factory=list)
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)  # what could not be read, or is missing
    note: str = ""  # what `opsctl runs list` says about the run's state (its NOTE column)


def _jsonl(path: Path, view: RunView) -> list[dict[str, Any]]:
    """The lines of a JSONL file that parse; the ones that do not are counted as a gap."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except OSError as exc:
        view.gaps.append(f"{path.name} unreadable: {exc}")
        return []
    out, bad = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(rec, dict):
            out.append(rec)
    if bad:
        view.gaps.append(f"{bad} unreadable line(s) in {path.name} (torn or truncated): not shown")
    return out


def _metrics(run_dir: Path, view: RunView) -> None:
    rewards: dict[str, dict[int, dict[str, Any]]] = {}
    evals: dict[str, dict[int, dict[str, Any]]] = {}
    trained: set[int] = set()
    for rec in _jsonl(run_dir / "metrics.jsonl", view):
        step = rec.get("step")
        if not isinstance(step, int):
            continue
        if rec.get("event") == "eval" and isinstance(rec.get("eval_accuracy"), int | float):
            evals.setdefault(str(rec.get("env") or "?"), {})[step] = rec  # a redone step: the later one
        elif rec.get("component") == "trainer":
            trained.add(step)
        elif rec.get("component") == "orchestrator":
            for key, value in rec.items():
                if key.startswith(REWARD_PREFIX) and isinstance(value, int | float):
                    point = {"step": step, "time": rec.get("time"), "value": float(value)}
                    rewards.setdefault(key[len(REWARD_PREFIX):], {})[step] = point
    view.rewards = {env: [pts[s] for s in sorted(pts)] for env, pts in sorted(rewards.items())}
    view.evals = {env: [pts[s] for s in sorted(pts)] for env, pts in sorted(evals.items())}
    missing = sorted(set(range(max(trained) + 1)) - trained) if trained else []
    if missing:
        view.gaps.append(f"trainer steps missing from metrics.jsonl: {_ranges(missing)}")


def _ranges(values: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7" (values sorted, distinct)."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _attempts(run_dir: Path, view: RunView) -> None:
    if (run_dir / LEDGER).exists():
        try:
            ledger = load_ledger(run_dir)
        except OpsctlError as exc:
            view.gaps.append(str(exc))
            return
        view.attempts = [asdict(a) for a in ledger.attempts]
        view.remediations = [asdict(r) for r in ledger.remediations]
        for step in ledger.checkpoints:
            if not (run_dir / "checkpoints" / "trainer" / f"step_{step}" / "COMMITTED").is_file():
                view.gaps.append(f"checkpoint step {step} is recorded in the ledger but missing on disk")
    else:
        for n, rec in sorted(read_attempts(run_dir).items()):
            view.attempts.append({"attempt": n, "job_id": rec.get("job_id"), "nodes": rec.get("nodes") or [],
                                  "resume_step": rec.get("resume_step") or 0, "start": rec.get("start"),
                                  "end": rec.get("end"), "exit_code": rec.get("exit_code"),
                                  "state": "RUNNING" if rec.get("end") is None else
                                  ("COMPLETED" if rec.get("exit_code") == 0 else "FAILED"),
                                  "failed_nodes": []})


def view_data(run_dir: Path) -> RunView:
    row = summarize(run_dir)
    view = RunView(row.run_id, str(run_dir), row.launcher, row.state, row.steps, row.steps_done)
    # the metrics' unreadable lines are counted below, with the rollouts'
    view.note = "; ".join(n for n in row.note.split("; ") if "unreadable line" not in n)
    _metrics(run_dir, view)
    _attempts(run_dir, view)
    view.rollouts = latest_attempt(_jsonl(run_dir / "rollouts.jsonl", view))
    return view


def latest_attempt(rollouts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rollouts in file order, where a step that appears again below the highest step so far is a
    resumed attempt redoing it: the earlier attempt's rollouts from that step on are dropped, as
    the metrics count a redone step once (its training was rolled back with the checkpoint)."""
    out: list[dict[str, Any]] = []
    for r in rollouts:
        step = r.get("step")
        if isinstance(step, int) and out and step < out[-1].get("step", -1):
            out = [x for x in out if x.get("step", -1) < step]
        out.append(r)
    return out


def data_script(run_dirs: list[Path]) -> str:
    views = [asdict(view_data(d)) for d in run_dirs]
    return "window.OPSCTL_RUNS = " + json.dumps(views, sort_keys=True).replace("</", "<\\/") + ";\n"


def write_site(run_dirs: list[Path], out: Path) -> Path:
    """The viewer as static files in `out` (index.html, its script and style, data.js)."""
    out.mkdir(parents=True, exist_ok=True)
    for asset in ASSETS.iterdir():
        if asset.is_file():
            shutil.copyfile(asset, out / asset.name)
    (out / "data.js").write_text(data_script(run_dirs), encoding="utf-8")
    return out / "index.html"


def serve(run_dirs: list[Path], host: str, port: int, ready: Any = None) -> None:
    """Serve the viewer until interrupted; data.js is read afresh for every request, so a live
    run's page shows its progress on reload. `ready(url)` is called once the port is bound."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    types = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            name = self.path.split("?", 1)[0].lstrip("/") or "index.html"
            if name == "data.js":
                body = data_script(run_dirs).encode()
            elif "/" not in name and (ASSETS / name).is_file():
                body = (ASSETS / name).read_bytes()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            kind = types.get(Path(name).suffix, "application/octet-stream")
            self.send_header("Content-Type", f"{kind}; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer((host, port), Handler)
    try:
        if ready is not None:
            ready(f"http://{host}:{httpd.server_address[1]}/")
        httpd.serve_forever(poll_interval=0.5)
    finally:
        httpd.server_close()
