"""The tiny models' character vocabulary (torch-free: the launch planner sizes tiny models too)."""

from __future__ import annotations

import string

SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]
# Everything the environments print: digits, lowercase letters, operators and the newline that
# ends an answer.
CHARS = list(string.digits + string.ascii_lowercase + "+-*=:?., \n")
TINY_VOCAB = len(SPECIAL) + len(CHARS)
# model.vocab = "text": printable ASCII and the newline, enough for JSON tool calls. Its first
# characters are CHARS in the same order, so an "arith" token keeps its id.
TEXT_CHARS = CHARS + [c for c in string.ascii_uppercase + string.punctuation if c not in CHARS]
VOCABS = {"arith": CHARS, "text": TEXT_CHARS}


def vocab_size(vocab: str) -> int:
    return len(SPECIAL) + len(VOCABS[vocab])

# The tiny tokenizer's chat template: a role letter, the content, a newline; an assistant turn ends
# with <eos>, which is trained with it (the model learns to stop). Only vocabulary characters.
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'][0] }}: {{ m['content'] }}\n"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}a: {% endif %}"
)

# The "text" vocabulary's template: as above, and an assistant turn's tool calls in the Hermes form
# the built-in server's parser reads (`inference.tool_call_parser = "hermes"`), rendered exactly as
# the server serialises their arguments, so a conversation re-rendered after a tool call extends the
# tokens the model sampled and the turns merge into one sample.
TINY_TOOL_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'][0] }}: {{ m['content'] or '' }}"
    "{% for c in m.get('tool_calls') or [] %}<tool_call>{\"name\": \"{{ c['function']['name'] }}\", "
    "\"arguments\": {% set a = c['function']['arguments'] %}{{ a if a is string else a | tojson }}}"
    "</tool_call>{% endfor %}{{ '\\n' }}"  # an expression: the template engine trims a newline after a tag
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}a: {% endif %}"
)
TEMPLATES = {"arith": TINY_CHAT_TEMPLATE, "text": TINY_TOOL_CHAT_TEMPLATE}

