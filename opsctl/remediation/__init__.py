"""The remediation service: ``opsctl remediator run`` evaluates every interval and remediates
through the same policy, brake and audit as ``opsctl health --remediate``.

Modules stay light to import (the CLI loads them lazily): ``settings`` (the ``[remediator]``
section), ``pause`` (the operator's pause file), ``status`` (what the last pass did, for
``remediator status``), ``metrics`` (its own Prometheus registry), ``alerts`` (Alertmanager's v2
API) and ``loop`` (the long-lived loop itself).
"""
