"""Parsers for the text and JSON formats of external tools, one module per format and version.

Every module here imports only the Python standard library: the same files are shipped to managed
hosts as Ansible ``module_utils`` (``ansible.cfg`` points ``module_utils`` at this directory), so
``from ansible.module_utils.ibstat import parse_ibstat`` and ``from opsctl.parsers.ibstat import
parse_ibstat`` load the very same code. Parsers never import a sibling; ``hw_facts_build`` (the
``hw`` fact of the hw_facts module and ``opsctl preflight``) does, with relative imports, which
resolve under either package name.

A parser takes text (or a mapping of file contents) and returns plain dataclasses for which
``dataclasses.asdict`` gives JSON-able data. A parser never runs a command.
"""
