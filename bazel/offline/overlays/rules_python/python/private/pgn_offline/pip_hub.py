"""pip_hub.py LOCK OUT [PIP_ARGS...]: a rules_python-style pip hub in OUT.

Downloads the wheels pinned in LOCK for this interpreter (`pip download
--no-deps --only-binary=:all:`), unpacks each into OUT/<name>/site and writes
OUT/<name>/BUILD.bazel (a py_library named <name>, also aliased as :pkg, whose
deps are the Requires-Dist entries that are in the lock) and
OUT/requirements.bzl. Names are normalized as rules_python does: lower case,
'-' and '.' to '_'.
"""

import email.parser
import os
import re
import subprocess
import sys
import zipfile


def norm(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def read_lock(path):
    pins = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("-"):
                continue
            line = line.rstrip("\\").strip()
            spec = line.split(";", 1)[0].split(" --hash", 1)[0].strip()
            m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;]+)$", spec)
            if not m:
                sys.exit(f"pip_hub: not a pinned requirement: {line!r}")
            pins.append((m.group(1), m.group(3)))
    return pins


def requires(site):
    """Names this distribution requires, extras left out."""
    for entry in os.listdir(site):
        if entry.endswith(".dist-info"):
            with open(os.path.join(site, entry, "METADATA"), encoding="utf-8") as f:
                msg = email.parser.Parser().parse(f, headersonly=True)
            out = []
            for req in msg.get_all("Requires-Dist") or []:
                if "extra ==" in req.replace('"', "").replace("'", ""):
                    continue
                m = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
                if m:
                    out.append(norm(m.group(1)))
            return out
    return []


def main():
    lock, out = sys.argv[1], os.path.abspath(sys.argv[2])
    pip_args = sys.argv[3:]
    pins = read_lock(lock)
    wheels = os.path.join(out, "_wheels")
    os.makedirs(wheels, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-cache-dir",
           "--no-deps", "--only-binary=:all:", "--dest", wheels]
    cmd += pip_args + [f"{n}=={v}" for n, v in pins]
    subprocess.run(cmd, check=True)

    by_name = {}
    for whl in os.listdir(wheels):
        if whl.endswith(".whl"):
            by_name[norm(whl.split("-", 1)[0])] = os.path.join(wheels, whl)
    names = [norm(n) for n, _ in pins]
    for name in names:
        if name not in by_name:
            sys.exit(f"pip_hub: no wheel downloaded for {name}")
    for name in names:
        site = os.path.join(out, name, "site")
        with zipfile.ZipFile(by_name[name]) as z:
            z.extractall(site)
        os.remove(by_name[name])
        deps = sorted(set(d for d in requires(site) if d in names and d != name))
        with open(os.path.join(out, name, "BUILD.bazel"), "w", encoding="utf-8") as f:
            f.write(f'''load("@rules_python//python:defs.bzl", "py_library")

package(default_visibility = ["//visibility:public"])

py_library(
    name = "{name}",
    srcs = glob(["site/**/*.py"], allow_empty = True),
    data = glob(
        ["site/**"],
        exclude = ["site/**/*.py", "site/**/__pycache__/**", "site/**/* *", "site/*.dist-info/RECORD"],
    ),
    imports = ["site"],
    deps = {["//" + d for d in deps]!r},
)

alias(
    name = "pkg",
    actual = ":{name}",
)
''')
    os.rmdir(wheels)
    with open(os.path.join(out, "BUILD.bazel"), "w", encoding="utf-8") as f:
        f.write('exports_files(["requirements.bzl"])\n')
    with open(os.path.join(out, "requirements.bzl"), "w", encoding="utf-8") as f:
        f.write(f'''"""requirement() for this pip hub, as in rules_python."""

all_requirements = [str(Label("//" + n)) for n in {names!r}]

def _norm(name):
    return name.lower().replace("-", "_").replace(".", "_")

def requirement(name):
    return str(Label("//" + _norm(name)))
''')


if __name__ == "__main__":
    main()
