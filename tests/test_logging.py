"""FL_LOG per-module levels; quiet by default."""

from __future__ import annotations

import logging

import pytest

from torch_fl import _logging
from torch_fl.errors import ConfigError


def test_default_is_quiet():
    _logging.configure("")
    assert not logging.getLogger("torch_fl.dispatch").isEnabledFor(logging.INFO)


def test_per_module_levels():
    try:
        _logging.configure("dispatch=DEBUG,compile=info")
        assert logging.getLogger("torch_fl.dispatch").isEnabledFor(logging.DEBUG)
        assert logging.getLogger("torch_fl.compile").getEffectiveLevel() == logging.INFO
        assert not logging.getLogger("torch_fl.plugins").isEnabledFor(logging.INFO)
    finally:
        for name in ("torch_fl.dispatch", "torch_fl.compile"):
            logging.getLogger(name).setLevel(logging.NOTSET)


def test_bare_level_applies_to_everything():
    assert _logging.parse_levels("DEBUG") == {"torch_fl": logging.DEBUG}


def test_bad_level_did_you_mean():
    with pytest.raises(ConfigError, match="Did you mean 'DEBUG'"):
        _logging.parse_levels("dispatch=DEBG")
