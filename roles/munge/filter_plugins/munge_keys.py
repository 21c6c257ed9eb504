"""The munge key a running cluster already uses, from ``slurp`` results of its hosts.

Two forms are adopted: text of at least 32 letters and digits (what this role or a vault writes),
and a binary key (SchedMD's form: ``mungekey``, or 1024 bytes of /dev/urandom) that at least two
hosts share. The random binary key Debian's package creates on each host at install differs from
host to host, so it is never adopted.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any

_KEY_RE = re.compile(r"^[A-Za-z0-9]{32,}$")
MIN_BINARY_BYTES = 32  # munged refuses shorter keys


def _content(result: Any) -> bytes | None:
    content = result.get("content") if isinstance(result, Mapping) else None
    if not content:
        return None
    try:
        return base64.b64decode(str(content))
    except ValueError:
        return None


def _text(data: bytes) -> str | None:
    try:
        text = data.decode("ascii").rstrip("\n")
    except UnicodeDecodeError:
        return None
    return text if _KEY_RE.match(text) else None


def munge_cluster_keys(results: Iterable[Any]) -> list[dict[str, str]]:
    """Distinct adoptable keys among the hosts' results, in first-seen order: ``{form: text, key}``
    or ``{form: binary, b64}`` (the exact bytes, base64)."""
    seen: list[bytes] = []
    counts: dict[bytes, int] = {}
    for result in results:
        data = _content(result)
        if data is None:
            continue
        if data not in counts:
            seen.append(data)
        counts[data] = counts.get(data, 0) + 1
    keys: list[dict[str, str]] = []
    for data in seen:
        text = _text(data)
        if text is not None:
            keys.append({"form": "text", "key": text})
        elif counts[data] >= 2 and len(data) >= MIN_BINARY_BYTES:
            keys.append({"form": "binary", "b64": base64.b64encode(data).decode("ascii")})
    return keys


def munge_key_form(slurped: Any) -> str:
    """The form of the key file kept on the controller (``slurp`` result): ``text`` (also when there
    is none: a new key is generated as text), ``binary``, or ``short`` (binary, under 32 bytes)."""
    data = _content(slurped)
    if data is None or _text(data) is not None:
        return "text"
    return "binary" if len(data) >= MIN_BINARY_BYTES else "short"


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"munge_cluster_keys": munge_cluster_keys, "munge_key_form": munge_key_form}
