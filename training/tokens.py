"""The tiny models' character vocabulary (torch-free: the launch planner sizes tiny models too)."""

from __future__ import annotations

import string

SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]
# Everything the environments print: digits, lowercase letters, operators and the newline that
# ends an answer.
CHARS = list(string.digits + string.ascii_lowercase + "+-*=:?., \n")
TINY_VOCAB = len(SPECIAL) + len(CHARS)
