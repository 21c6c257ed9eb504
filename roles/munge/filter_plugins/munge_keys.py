"""The munge key a running cluster already uses, from ``slurp`` results of its hosts.

Only keys this role (or a vault) could have written count: text of at least 32 letters and digits.
The random binary key the Debian package creates on each host at install is never adopted.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any

_KEY_RE = re.compile(r"^[A-Za-z0-9]{32,}$")


def munge_cluster_keys(results: Iterable[Any]) -> list[str]:
    """Distinct adoptable keys among the hosts' results, in first-seen order."""
    keys: list[str] = []
    for result in results:
        content = result.get("content") if isinstance(result, Mapping) else None
        if not content:
            continue
        try:
            text = base64.b64decode(str(content)).decode("ascii")
        except (ValueError, UnicodeDecodeError):
            continue
        if _KEY_RE.match(text) and text not in keys:
            keys.append(text)
    return keys


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"munge_cluster_keys": munge_cluster_keys}
