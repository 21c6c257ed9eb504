"""The action ladder: what a fault needs before the node may take work again, least to most.

One home for the ladder that the XID catalogue's classes, the check catalogue's action classes and
remediation's latches all rank on (``opsctl.checks.catalogue.required_action`` reads a verdict's
place on it; ``opsctl.remediation`` latches it).
"""

from __future__ import annotations

# none: nothing to prove, the node is resumed after clean passes; restart_app likewise (the fault was
# the application's); reset_gpu: evidence of a GPU reset; reboot: a new boot id; replace: a person.
ACTIONS = ("none", "restart_app", "reset_gpu", "reboot", "replace")
ACTION_RANK = {a: i for i, a in enumerate(ACTIONS)}
# An XID's class: "ignore" (not a fault) or the action its fault needs.
XID_CLASSES = ("ignore", *ACTIONS[1:])
# Every class a check may name, ranked (none < ignore < restart_app < ... < replace).
ACTION_CLASSES = ("none", *XID_CLASSES)
# Fault classes a node must not take work with (its GPU corrupts or loses jobs until reset, reboot
# or repair): an XID of these classes FAILs (drain), and remediation's fatal allowance is theirs.
DRAIN_CLASSES = frozenset(ACTIONS[ACTION_RANK["reset_gpu"]:])
