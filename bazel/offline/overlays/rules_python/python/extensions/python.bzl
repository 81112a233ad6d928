"""Offline python extension: the system interpreter instead of downloads.

Takes the toolchain tag of current rules_python releases (python_version,
is_default, ignore_root_user_error, ...) and ignores the version asked for:
targets run with python3 from PATH (the autodetecting toolchain registered in
MODULE.bazel). Also makes @pgn_system_python, the interpreter's C headers,
behind //python/cc:current_py_cc_headers.
"""

def _system_python_impl(rctx):
    python = rctx.which("python3")
    if not python:
        fail("offline rules_python: no python3 on PATH")
    res = rctx.execute([python, "-c", "import sys, sysconfig; print(sysconfig.get_paths()['include']); print('%d.%d' % sys.version_info[:2])"])
    if res.return_code != 0:
        fail("offline rules_python: python3 failed: " + res.stderr)
    include, version = res.stdout.strip().split("\n")
    if not rctx.path(include + "/Python.h").exists:
        fail("offline rules_python: no Python.h in %s (install python3-dev)" % include)
    rctx.symlink(include, "include")
    rctx.file("BUILD.bazel", """\
load("@rules_cc//cc:defs.bzl", "cc_library")

# The C headers of the system interpreter (Python {version}).
cc_library(
    name = "python_headers",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
    visibility = ["//visibility:public"],
)
""".format(version = version))

_system_python = repository_rule(
    implementation = _system_python_impl,
    environ = ["PATH"],
)

def _hub_impl(rctx):
    rctx.file("BUILD.bazel", "")
    rctx.file("interpreters.bzl", "INTERPRETER_LABELS = {}\n")

_hub = repository_rule(implementation = _hub_impl)

def _python_impl(module_ctx):
    _hub(name = "pythons_hub")
    _system_python(name = "pgn_system_python")

python = module_extension(
    implementation = _python_impl,
    tag_classes = {
        "toolchain": tag_class(attrs = {
            "configure_coverage_tool": attr.bool(),
            "ignore_root_user_error": attr.bool(),
            "is_default": attr.bool(),
            "name": attr.string(),
            "python_version": attr.string(mandatory = True),
        }),
    },
)
