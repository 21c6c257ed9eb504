"""A new boot of one simulated node's hardware, run by the node itself as it boots.

The lab's GPU machines are containers on the host's kernel: their hardware state (a host file
bind-mounted at /var/lib/hwsim) would otherwise outlive a reboot, so an XID, a pending row remap or
the driver's recovery action read the same after `scontrol reboot` as before it. The lab's boot
unit (opsctl/lab/labsim.py) runs this once per boot, before the tools and the exporter read the
state, and the node comes up as real hardware would (faults.new_boot: volatile state gone, damage
kept). Not a fault: nothing is added to the node's list of injected faults.

Standard library only (the machines' bare python3)::

    python3 -m opsctl.hwsim.boot --state /var/lib/hwsim/state.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from opsctl.hwsim.faults import new_boot
from opsctl.hwsim.state import load, save


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m opsctl.hwsim.boot", description=__doc__.split("\n")[0])
    parser.add_argument("--state", required=True, help="the node's hardware state file")
    args = parser.parse_args(argv)
    try:
        state = load(args.state)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"hwsim boot: cannot read {args.state}: {exc}", file=sys.stderr)
        return 2
    new_boot(state)
    save(state, args.state)
    print(f"hwsim boot: {state.node} booted (boot id {state.boot_id})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
