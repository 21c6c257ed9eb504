"""Command-line shims that stand in for the hardware tools on simulated nodes.

    python -m opsctl.hwsim.tools nvidia-smi -q --state FILE
    python -m opsctl.hwsim.tools ibstat [CA]
    python -m opsctl.hwsim.tools perfquery -x [-C CA] [-P PORT]
    python -m opsctl.hwsim.tools dcgmi diag -r 1 -j
    python -m opsctl.hwsim.tools dcgmi health -c -j
    python -m opsctl.hwsim.tools dmesg [-T]
    python -m opsctl.hwsim.tools ib-sysfs --root DIR     (write a /sys/class/infiniband-like tree)
    python -m opsctl.hwsim.tools fault NODE_STATE_FILE SPEC | heal NODE_STATE_FILE
    python -m opsctl.hwsim.tools ib_write_bw | all_reduce_perf | fabric ...   (see fabric_tools)

Installed as scripts named like the real tools (``install_shims``), the tool is picked by the script
name. The state file is ``--state FILE``, else ``$HWSIM_STATE``, else ``/var/lib/hwsim/state.json``.
Only the standard library is used: lab machines run these with Debian's bare python3. These are
simulators: a production inventory never installs them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from opsctl.hwsim import fabric_tools
from opsctl.hwsim.render_dcgm import (
    DIAG_KILLED_EXIT,
    diag_failed,
    render_dcgmi_diag,
    render_dcgmi_health,
    render_dcgmi_link_status,
)
from opsctl.hwsim.render_dmesg import render_dmesg
from opsctl.hwsim.render_ib import UnknownDevice, render_ibstat, render_perfquery_x, write_sysfs_tree
from opsctl.hwsim.render_nvidia_smi import (
    UnknownField,
    render_list,
    render_nvidia_smi_q,
    render_nvlink_status,
    render_query_gpu,
)
from opsctl.hwsim.state import NodeHardware, load, save

STATE_ENV = "HWSIM_STATE"
DEFAULT_STATE = "/var/lib/hwsim/state.json"
SHIM_NAMES = ("nvidia-smi", "ibstat", "perfquery", "dcgmi", "dmesg", *fabric_tools.SHIM_NAMES)


class ToolError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _state(path: str | None) -> NodeHardware:
    path = path or os.environ.get(STATE_ENV) or DEFAULT_STATE
    try:
        return load(path)
    except FileNotFoundError:
        raise ToolError(f"no simulated hardware state at {path} (set --state or ${STATE_ENV})", 2) from None
    except (OSError, ValueError, TypeError) as exc:
        raise ToolError(f"cannot read simulated hardware state {path}: {exc}", 2) from None


def _parser(prog: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, add_help=True)
    ap.add_argument("--state", help=f"state file (default ${STATE_ENV} or {DEFAULT_STATE})")
    return ap


def nvidia_smi(argv: Sequence[str]) -> str:
    ap = _parser("nvidia-smi")
    ap.add_argument("-q", "--query", action="store_true")
    ap.add_argument("words", nargs="*")
    ap.add_argument("-s", "--status", action="store_true")
    ap.add_argument("-L", "--list-gpus", action="store_true")
    ap.add_argument("--query-gpu")
    ap.add_argument("--format")
    args = ap.parse_args(argv)
    state = _state(args.state)
    if not state.present_gpus:
        # What the real tool prints, with its exit code, when the driver sees no GPU.
        raise ToolError("No devices were found", 6)
    if args.words == ["nvlink"] and args.status:
        return render_nvlink_status(state)
    if args.query and not args.words:
        return render_nvidia_smi_q(state)
    if args.list_gpus:
        return render_list(state)
    if args.query_gpu:
        if not args.format or not args.format.startswith("csv"):
            raise ToolError("Please specify the output format: --format=csv", 2)
        try:
            return render_query_gpu(state, args.query_gpu.split(","), args.format)
        except UnknownField as exc:
            raise ToolError(f'Field "{exc.args[0]}" is not a valid field to query.', 2) from None
    raise ToolError("simulated nvidia-smi supports -q, -L, --query-gpu and 'nvlink -s'", 2)


def ibstat(argv: Sequence[str]) -> str:
    ap = _parser("ibstat")
    ap.add_argument("ca", nargs="?")
    ap.add_argument("port", nargs="?")
    args = ap.parse_args(argv)
    try:
        return render_ibstat(_state(args.state), args.ca)
    except UnknownDevice:
        raise ToolError(
            f"ibpanic: [1] main: stat of IB device '{args.ca}' failed: No such file or directory", 255
        ) from None


def perfquery(argv: Sequence[str]) -> str:
    ap = _parser("perfquery")
    ap.add_argument("-x", "--extended", action="store_true")
    ap.add_argument("-C", "--Ca", dest="ca")
    ap.add_argument("-P", "--Port", dest="port", type=int, default=1)
    ap.add_argument("address", nargs="*", help="ignored: the simulator answers for the local port")
    args = ap.parse_args(argv)
    if not args.extended:
        raise ToolError("simulated perfquery supports only -x (extended counters)", 2)
    try:
        return render_perfquery_x(_state(args.state), args.ca, args.port)
    except UnknownDevice as exc:
        raise ToolError(f"ibwarn: [1] mad_rpc_open_port: can't open UMAD port ({exc})", 255) from None


def dcgmi(argv: Sequence[str]) -> str:
    ap = _parser("dcgmi")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = ap.add_subparsers(dest="command", required=True)
    diag = sub.add_parser("diag", parents=[common])
    diag.add_argument("-r", "--run", required=True)
    diag.add_argument("-j", "--json", action="store_true")
    diag.add_argument("-g", "--group", default="0")
    health = sub.add_parser("health", parents=[common])
    health.add_argument("-c", "--check", action="store_true")
    health.add_argument("-j", "--json", action="store_true")
    health.add_argument("-g", "--group", default="0")
    nvlink = sub.add_parser("nvlink", parents=[common])
    nvlink.add_argument("-s", "--link-status", action="store_true")
    args = ap.parse_args(argv)
    state = _state(args.state)
    if args.command == "nvlink":
        if not args.link_status:
            raise ToolError("simulated dcgmi nvlink supports only --link-status", 2)
        return render_dcgmi_link_status(state)
    if not args.json:
        raise ToolError("simulated dcgmi prints JSON only: add -j", 2)
    if args.command == "health":
        if not args.check:
            raise ToolError("simulated dcgmi health supports only -c", 2)
        return render_dcgmi_health(state)
    levels = {"1": 1, "2": 2, "3": 3, "4": 4, "short": 1, "medium": 2, "long": 3, "xlong": 4}
    if args.run not in levels:
        raise ToolError(f"simulated dcgmi diag: unknown run level {args.run!r}", 2)
    text = render_dcgmi_diag(state, levels[args.run])
    if state.diag_killed:
        sys.stdout.write(text)
        raise ToolError("", DIAG_KILLED_EXIT)
    if diag_failed(state, levels[args.run]):
        sys.stdout.write(text)
        raise ToolError("", 1)
    return text


def dmesg(argv: Sequence[str]) -> str:
    ap = _parser("dmesg")
    ap.add_argument("-T", "--ctime", action="store_true")
    args = ap.parse_args(argv)
    return render_dmesg(_state(args.state), human_time=args.ctime, kernel_boot=_kernel_boot_time())


# Where a lab machine's boot unit covered /proc/stat with the machine's own boot (opsctl/lab/labsim.py),
# it first saved the running kernel's btime here.
KERNEL_BTIME_FILE = "/run/opsctl-labsim/kernel-btime"


def _kernel_boot_time() -> float | None:
    """Boot time of the kernel this shim runs under (its btime). The real dmesg stamps count from
    it, and the SSH source reads the same kernel's /proc/uptime to turn stamps into wall time;
    stamping from the simulated boot instead (which ``heal`` and ``reboot`` move to now) would put a
    fresh XID hours in the past. btime is whole seconds and fixed for the boot, so a line prints the
    same stamp every time (readers tell lines apart by it). None where it cannot be read."""
    try:
        with open(KERNEL_BTIME_FILE, encoding="ascii") as f:
            return float(f.read().strip())
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def ib_sysfs(argv: Sequence[str]) -> str:
    ap = _parser("ib-sysfs")
    ap.add_argument("--root", required=True, help="directory to write the infiniband class tree into")
    args = ap.parse_args(argv)
    write_sysfs_tree(_state(args.state), args.root)
    return ""


def fault(argv: Sequence[str]) -> str:
    from opsctl.hwsim.faults import FaultError, apply_fault, heal

    ap = argparse.ArgumentParser(prog="hwsim fault")
    ap.add_argument("state_file")
    ap.add_argument("spec", nargs="?", help="fault spec; omit with --heal")
    ap.add_argument("--heal", action="store_true")
    args = ap.parse_args(argv)
    state = _state(args.state_file)
    try:
        if args.heal:
            heal(state)
        elif args.spec:
            apply_fault(state, args.spec)
        else:
            raise ToolError("give a fault spec or --heal", 2)
    except FaultError as exc:
        raise ToolError(str(exc), 2) from None
    save(state, args.state_file)
    return ""


TOOLS: dict[str, Callable[[Sequence[str]], str]] = {
    "nvidia-smi": fabric_tools.with_fabric(nvidia_smi),
    "ibstat": ibstat,
    "perfquery": perfquery,
    "dcgmi": dcgmi,
    "dmesg": dmesg,
    "ib-sysfs": ib_sysfs,
    "fault": fault,
    **fabric_tools.TOOLS,
}


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    name = prog if prog is not None else os.path.basename(sys.argv[0])
    if name not in TOOLS:
        if not argv or argv[0] not in TOOLS:
            print(f"usage: python -m opsctl.hwsim.tools {{{','.join(TOOLS)}}} ARGS...", file=sys.stderr)
            return 2
        name, argv = argv[0], argv[1:]
    try:
        sys.stdout.write(TOOLS[name](argv))
    except (ToolError, fabric_tools.FabricToolError) as exc:
        if str(exc):
            print(str(exc), file=sys.stderr)
        return exc.code
    return 0


def install_shims(
    bin_dir: str | os.PathLike[str],
    lib_dir: str | os.PathLike[str],
    *,
    lib_dir_in_machine: str | None = None,
    python: str = "/usr/bin/python3",
    names: Sequence[str] = SHIM_NAMES,
) -> list[Path]:
    """Copy the simulator's sources into ``lib_dir`` and write scripts named like the real tools.

    The lab calls this against a machine's root, e.g. ``install_shims(ROOT/"usr/local/bin",
    ROOT/"usr/local/lib/hwsim", lib_dir_in_machine="/usr/local/lib/hwsim")``; the scripts need only
    ``python`` and the copied files.
    """
    pkg_src = Path(__file__).resolve().parent
    lib = Path(lib_dir)
    (lib / "opsctl" / "hwsim").mkdir(parents=True, exist_ok=True)
    for f in ("__init__.py", "errors.py"):
        shutil.copy2(pkg_src.parent / f, lib / "opsctl" / f)
    for src in pkg_src.glob("*.py"):
        shutil.copy2(src, lib / "opsctl" / "hwsim" / src.name)
    seen_as = lib_dir_in_machine or str(lib.resolve())
    bin_path = Path(bin_dir)
    bin_path.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in names:
        script = bin_path / name
        script.write_text(
            f"#!{python}\n"
            "# Simulated hardware tool (opsctl hwsim); never installed on production nodes.\n"
            "import sys\n"
            f"sys.path.insert(0, {seen_as!r})\n"
            "from opsctl.hwsim.tools import main\n"
            f"sys.exit(main(prog={name!r}))\n",
            encoding="utf-8",
        )
        script.chmod(0o755)
        written.append(script)
    return written


if __name__ == "__main__":
    sys.exit(main(prog=None))
