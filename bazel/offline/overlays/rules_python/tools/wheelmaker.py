"""wheelmaker: py_wheel's action, with the command line of rules_python 0.22.

Writes a reproducible wheel: entries sorted, fixed timestamps, RECORD with
sha256 digests; WHEEL says Root-Is-Purelib: false unless the tag is
py*-none-any.
"""

import argparse
import base64
import hashlib
import os
import stat
import zipfile

ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def escape(segment):
    return segment.replace("-", "_")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--name", required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--python_tag", required=True)
    p.add_argument("--abi", required=True)
    p.add_argument("--platform", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--name_file", required=True)
    p.add_argument("--strip_path_prefix", action="append", default=[])
    p.add_argument("--volatile_status_file")
    p.add_argument("--stable_status_file")
    p.add_argument("--input_file_list", required=True)
    p.add_argument("--metadata_file", required=True)
    p.add_argument("--entry_points_file")
    p.add_argument("--description_file")
    p.add_argument("--extra_distinfo_file", action="append", default=[])
    a = p.parse_args()

    files = []
    with open(a.input_file_list, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            inside, real = line.split(";", 1)
            for prefix in a.strip_path_prefix:
                if inside.startswith(prefix):
                    inside = inside[len(prefix):]
                    break
            files.append((inside, real))
    files.sort()

    distinfo = f"{escape(a.name)}-{a.version}.dist-info"
    with open(a.metadata_file, encoding="utf-8") as f:
        lines = f.read().rstrip("\n").split("\n")
    lines.insert(2, f"Version: {a.version}")
    metadata = "\n".join(lines) + "\n"
    if a.description_file:
        with open(a.description_file, encoding="utf-8") as f:
            description = f.read()
        if a.description_file.endswith(".md"):
            metadata += "Description-Content-Type: text/markdown\n"
        metadata += "\n" + description
    purelib = a.abi == "none" and a.platform == "any"
    wheel = (
        "Wheel-Version: 1.0\n"
        "Generator: pygrpc-native offline wheelmaker\n"
        f"Root-Is-Purelib: {'true' if purelib else 'false'}\n"
    )
    for py in a.python_tag.split("."):
        for abi in a.abi.split("."):
            for plat in a.platform.split("."):
                wheel += f"Tag: {py}-{abi}-{plat}\n"

    record = []
    wheel_name = os.path.basename(a.out)

    def add(z, arcname, data, executable=False):
        info = zipfile.ZipInfo(arcname, date_time=ZIP_DATE)
        info.compress_type = zipfile.ZIP_DEFLATED
        mode = 0o755 if executable else 0o644
        info.external_attr = (stat.S_IFREG | mode) << 16
        z.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arcname},sha256={digest},{len(data)}")

    with zipfile.ZipFile(a.out, "w") as z:
        for inside, real in files:
            with open(real, "rb") as f:
                data = f.read()
            add(z, inside, data, executable=os.access(real, os.X_OK) and not inside.endswith(".py"))
        add(z, f"{distinfo}/METADATA", metadata.encode())
        add(z, f"{distinfo}/WHEEL", wheel.encode())
        if a.entry_points_file:
            with open(a.entry_points_file, "rb") as f:
                add(z, f"{distinfo}/entry_points.txt", f.read())
        for spec in a.extra_distinfo_file:
            name, real = spec.split(";", 1)
            with open(real, "rb") as f:
                add(z, f"{distinfo}/{name}", f.read())
        record.append(f"{distinfo}/RECORD,,")
        info = zipfile.ZipInfo(f"{distinfo}/RECORD", date_time=ZIP_DATE)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        z.writestr(info, "\n".join(record) + "\n")
    with open(a.name_file, "w", encoding="utf-8") as f:
        f.write(wheel_name)


if __name__ == "__main__":
    main()
