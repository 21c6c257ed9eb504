"""JSON text laid out the way jsoncpp's ``Value::toStyledString()`` lays it out.

``dcgmi ... -j`` prints its JSON with jsoncpp's default stream writer: tab indentation, ``" : "``
between key and value, keys in byte order, an object or a long array opening on its own line, and
short arrays of scalars on one line (``[ "a", "b" ]``). Parsers written against real dcgmi output
(including line-oriented ones) therefore see the same text from the simulator.
"""

from __future__ import annotations

import json
from typing import Any

_RIGHT_MARGIN = 74


class _Writer:
    def __init__(self) -> None:
        self.out: list[str] = []
        self.indent_string = ""
        self.indented = True
        self.child_values: list[str] = []
        self.add_child_values = False

    def push(self, text: str) -> None:
        if self.add_child_values:
            self.child_values.append(text)
        else:
            self.out.append(text)

    def write_indent(self) -> None:
        self.out.append("\n" + self.indent_string)

    def write_with_indent(self, text: str) -> None:
        if not self.indented:
            self.write_indent()
        self.out.append(text)
        self.indented = False

    def value(self, v: Any) -> None:
        if v is None:
            self.push("null")
        elif isinstance(v, bool):
            self.push("true" if v else "false")
        elif isinstance(v, int):
            self.push(str(v))
        elif isinstance(v, float):
            self.push(f"{v:.17g}")
        elif isinstance(v, str):
            self.push(json.dumps(v, ensure_ascii=True))
        elif isinstance(v, list):
            self.array(v)
        elif isinstance(v, dict):
            self.obj(v)
        else:
            raise TypeError(f"cannot write {type(v).__name__}")

    def obj(self, v: dict[str, Any]) -> None:
        if not v:
            self.push("{}")
            return
        self.write_with_indent("{")
        self.indent_string += "\t"
        keys = sorted(v, key=lambda k: k.encode())
        for n, key in enumerate(keys):
            self.write_with_indent(json.dumps(key, ensure_ascii=True))
            self.out.append(" : ")
            self.value(v[key])
            if n < len(keys) - 1:
                self.out.append(",")
        self.indent_string = self.indent_string[:-1]
        self.write_with_indent("}")

    def multiline(self, v: list[Any]) -> bool:
        multi = len(v) * 3 >= _RIGHT_MARGIN
        self.child_values = []
        for child in v:
            if multi:
                break
            multi = isinstance(child, (list, dict)) and len(child) > 0
        if not multi:
            self.add_child_values = True
            length = 4 + (len(v) - 1) * 2
            for child in v:
                self.value(child)
            self.add_child_values = False
            length += sum(len(c) for c in self.child_values)
            multi = length >= _RIGHT_MARGIN
        return multi

    def array(self, v: list[Any]) -> None:
        if not v:
            self.push("[]")
            return
        if self.multiline(v):
            self.write_with_indent("[")
            self.indent_string += "\t"
            children = self.child_values
            self.child_values = []
            for n, child in enumerate(v):
                if children:
                    self.write_with_indent(children[n])
                else:
                    if not self.indented:
                        self.write_indent()
                    self.indented = True
                    self.value(child)
                    self.indented = False
                if n < len(v) - 1:
                    self.out.append(",")
            self.indent_string = self.indent_string[:-1]
            self.write_with_indent("]")
        else:
            self.out.append("[ " + ", ".join(self.child_values) + " ]")
            self.child_values = []


def to_styled_string(value: Any) -> str:
    w = _Writer()
    w.value(value)
    return "".join(w.out) + "\n"
