"""Remediation: the one room where on-call decisions are made and acted on.

Deciding and acting: ``policy`` (decisions without I/O: storms, the brake, latches; ``decide``
updates the loaded state in place), ``proof`` (a fix proven before a resume), ``unknown``
(probe-hung, evidence-lost, unknown alerts, the coverage refusal), ``state`` (the state file, its
lock, latches, drain intents), ``actions`` (``GuardedSlurm``, ``act``, the decision log) and
``passes`` (``remediation_pass``, the one pass that ``opsctl health --remediate``, the service, the
watcher and preflight all run).

The service, ``opsctl remediator run``, runs ``opsctl health --remediate`` every interval: ``settings``
(the ``[remediator]`` section), ``pause`` (the operator's pause file), ``status`` (what the last pass
did, for ``remediator status``), ``metrics`` (its own Prometheus registry), ``alerts``
(Alertmanager's v2 API) and ``loop`` (the long-lived loop itself). Modules stay light to import (the
CLI loads them lazily).
"""
