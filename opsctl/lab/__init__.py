"""The machine lab: systemd-nspawn machines on a private bridge, with simulated GPU/IB hardware.

Everything here is for development, tests and drills. Nothing in this package is installed on a
production host: the production inventory never references it.
"""
