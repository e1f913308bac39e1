"""Fixtures for the vecenv.sb3 tests."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def closing():
    """Collect VecEnvs and close them after the test, even when it fails."""
    made: list = []
    yield made.append
    for venv in made:
        venv.close()
