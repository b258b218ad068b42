"""`ConfigError`, the trainer's one error for a setting or a run file that cannot work.

Its own module so that every part of the harness (config, trackers, TRL names, run files) can
raise it without importing `mrtpo.harness.config`, which imports them; `config` re-exports it.
"""
from __future__ import annotations


class ConfigError(ValueError):
    """A setting (or a combination of settings) that cannot work; the message says what to do."""
