"""Puts the package under test (this checkout's ``sdk/python``) first on the path."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
