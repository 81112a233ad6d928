"""Runs a benchmark module of bench/ under Bazel (`bazel run //bench:compare`).

    bench_main.py MODULE [--loadgen PATH] [args...]

Runs MODULE (e.g. bench.compare) as `python -m MODULE args...` would, with
tool paths that Bazel passes relative to the runfiles tree (--loadgen,
--ceiling, --goserver) made absolute first: the benchmark starts them from
another working directory.
"""

import os
import runpy
import sys

PATH_FLAGS = ("--loadgen", "--ceiling", "--goserver")


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: bench_main.py MODULE [args...]")
    module, args = sys.argv[1], sys.argv[2:]
    out = []
    for i, arg in enumerate(args):
        if i > 0 and args[i - 1] in PATH_FLAGS:
            arg = os.path.abspath(arg)
        elif "=" in arg and arg.split("=", 1)[0] in PATH_FLAGS:
            flag, value = arg.split("=", 1)
            arg = flag + "=" + os.path.abspath(value)
        out.append(arg)
    sys.argv = [module] + out
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
