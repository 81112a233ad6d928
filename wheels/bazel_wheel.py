"""Writes one release wheel for Bazel (wheels/wheel.bzl), as wheels/build.py does.

Bazel has built the extension for the target platform; this packs it with
the Python package into `<out>/<dist>-<version>-<tag>.whl` through the same
code as build.py (wheelfile.py), so the metadata, file list, modes and
timestamps are the same as the pip wheels'.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import wheelfile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, required=True, help="the folder of pyproject.toml, README and LICENSE")
    parser.add_argument("--package", type=Path, required=True, help="the folder of the pygrpc_native sources")
    parser.add_argument("--extension", type=Path, required=True, help="the built _native.abi3.so")
    parser.add_argument("--tag", required=True, help="the wheel tag, e.g. cp310-abi3-manylinux2014_x86_64")
    parser.add_argument("--epoch", type=int, required=True, help="the zip entries' time (SOURCE_DATE_EPOCH)")
    parser.add_argument("--out", type=Path, required=True, help="the folder the wheel goes to")
    args = parser.parse_args()
    files = wheelfile.package_files(args.package, args.extension)
    wheelfile.write(args.out, args.root, files, args.tag, args.epoch)


if __name__ == "__main__":
    main()
