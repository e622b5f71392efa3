"""The installed distribution's version, which the command prints and each protocol's peer is told."""

from __future__ import annotations


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nexusflow")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0"
