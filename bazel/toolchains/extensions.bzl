"""pinned_toolchains: the build's toolchains, at the pins of wheels/toolchain.json.

One file pins every input of the wheel build that is not in this repository
(wheels/build.py reads it too), so Bazel and `bash wheels/build.sh` build with
the same Go release, the same zig and the same CPython headers. This
extension turns those pins into repositories (fetched only when used):

  * `pgn_go_<goos>_<goarch>`: the Go SDK for each build machine
    (go_sdk.bzl); MODULE.bazel hands them to rules_go's `go_sdk.wrap`;
  * `pgn_zig`: zig, the C compiler and linker of every target platform, and
    its cc toolchains (zig.bzl, zig_cc.bzl);
  * `pgn_python_headers_<arch>`: the CPython headers the extension compiles
    against (python_headers.bzl); //bazel/toolchains:python_headers picks
    the target's;
  * `pgn_release_targets`: `targets.bzl` with RELEASE_WHEELS, the release
    targets that have a Bazel platform, for //wheels.
"""

load(":go_sdk.bzl", "go_toolchain_module")
load(":python_headers.bzl", "python_headers")
load(":zig.bzl", "zig_sdk")

# The cc toolchain of each target platform (zig_cc.bzl's PLATFORM_CONSTRAINTS)
# and the release target of wheels/toolchain.json whose zig triple it uses.
_ZIG_TARGETS = {
    "linux_x86_64": "manylinux2014_x86_64",
    "linux_aarch64": "manylinux2014_aarch64",
    "macos_x86_64": "macosx_12_0_x86_64",
    "macos_arm64": "macosx_12_0_arm64",
}

def _release_targets_impl(repository_ctx):
    repository_ctx.file("BUILD.bazel", "")
    repository_ctx.file("targets.bzl", """\"\"\"Generated from wheels/toolchain.json by //bazel/toolchains:extensions.bzl.\"\"\"

# Release target name -> its Bazel platform (//bazel/platforms) and wheel platform tag.
RELEASE_WHEELS = %s
""" % json.encode_indent(json.decode(repository_ctx.attr.wheels), indent = "    "))

_release_targets = repository_rule(
    implementation = _release_targets_impl,
    attrs = {"wheels": attr.string(mandatory = True, doc = "RELEASE_WHEELS as JSON.")},
)

def _pinned_toolchains_impl(module_ctx):
    pins = json.decode(module_ctx.read(Label("//wheels:toolchain.json")))
    go = pins["go"]
    for machine, sha256 in go["module_zip_sha256"].items():
        goos, goarch = machine.split("-")
        go_toolchain_module(
            name = "pgn_go_%s_%s" % (goos, goarch),
            release = go["version"],
            goos = goos,
            goarch = goarch,
            sha256 = sha256,
        )
    zig_sdk(
        name = "pgn_zig",
        version = pins["zig"]["version"],
        requirements = Label("//wheels:requirements-build.txt"),
        targets = {
            name: pins["targets"][release]["zig_target"]
            for name, release in _ZIG_TARGETS.items()
        },
    )
    _release_targets(
        name = "pgn_release_targets",
        wheels = json.encode({
            release: {"platform": name, "platform_tag": pins["targets"][release]["platform_tag"]}
            for name, release in _ZIG_TARGETS.items()
        }),
    )
    headers = pins["python_headers"]
    for arch, sha256 in headers["deb_sha256"].items():
        python_headers(
            name = "pgn_python_headers_" + arch,
            package = headers["debian_package"],
            version = headers["taken_from_version"],
            arch = arch,
            sha256 = sha256,
        )

pinned_toolchains = module_extension(
    implementation = _pinned_toolchains_impl,
    doc = "Repositories of the toolchains pinned in wheels/toolchain.json.",
)
