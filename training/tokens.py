"""The tiny models' character vocabulary (torch-free: the launch planner sizes tiny models too)."""

from __future__ import annotations

import string

SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]
# Everything the environments print: digits, lowercase letters, operators and the newline that
# ends an answer.
CHARS = list(string.digits + string.ascii_lowercase + "+-*=:?., \n")
TINY_VOCAB = len(SPECIAL) + len(CHARS)

# The tiny tokenizer's chat template: a role letter, the content, a newline; an assistant turn ends
# with <eos>, which is trained with it (the model learns to stop). Only vocabulary characters.
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'][0] }}: {{ m['content'] }}\n"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}a: {% endif %}"
)
