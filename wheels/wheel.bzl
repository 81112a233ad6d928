"""release_wheel: the abi3 wheel of one target platform, built from the graph.

The extension (//python/pygrpc_native:_native.abi3.so) is built for
`platform` (a transition: one `bazel build` makes every platform's wheel
from this x86_64 Linux machine, with the pinned zig and Go of
//bazel/toolchains) and packed with the Python sources by
wheels/bazel_wheel.py, the code wheels/build.py uses, so the wheel carries
the same METADATA (Requires-Dist included) as the pip-built one.

The output is a folder holding `<dist>-<version>-<tag>.whl`: the file name
comes from pyproject.toml, which Bazel can't read while it plans the build.
"""

load("@bazel_skylib//rules:common_settings.bzl", "BuildSettingInfo")

def _platform_transition_impl(_settings, attr):
    if not attr.platform:
        return {}
    return {"//command_line_option:platforms": str(attr.platform)}

_platform_transition = transition(
    implementation = _platform_transition_impl,
    inputs = [],
    outputs = ["//command_line_option:platforms"],
)

def _release_wheel_impl(ctx):
    extension = ctx.file.extension
    out = ctx.actions.declare_directory(ctx.label.name)
    # The sources; the extension comes separately.
    package_files = [f for f in ctx.files.package_files if f.is_source]
    root = ctx.label.workspace_root or "."
    args = ctx.actions.args()
    args.add("--root", root)
    args.add("--package", root + "/python/pygrpc_native")
    args.add("--extension", extension)
    args.add("--tag", "cp310-abi3-" + ctx.attr.platform_tag)
    args.add("--epoch", ctx.attr._source_date_epoch[BuildSettingInfo].value)
    args.add("--out", out.path)
    ctx.actions.run(
        executable = ctx.executable._tool,
        arguments = [args],
        inputs = package_files + [extension] + ctx.files.project_files,
        outputs = [out],
        mnemonic = "PyWheel",
        progress_message = "Writing the %s wheel" % ctx.attr.platform_tag,
    )
    return [DefaultInfo(files = depset([out]))]

release_wheel = rule(
    implementation = _release_wheel_impl,
    attrs = {
        "platform": attr.label(doc = "The target platform; unset: the build's own."),
        "platform_tag": attr.string(mandatory = True, doc = "The wheel's platform tag (wheels/toolchain.json)."),
        "extension": attr.label(
            default = "//python/pygrpc_native:_native.abi3.so",
            allow_single_file = True,
            cfg = _platform_transition,
        ),
        "package_files": attr.label(default = "//python/pygrpc_native:package_files", cfg = _platform_transition),
        "project_files": attr.label_list(
            default = ["//:pyproject.toml", "//:README.md", "//:LICENSE"],
            allow_files = True,
        ),
        "_source_date_epoch": attr.label(default = "//wheels:source_date_epoch"),
        "_tool": attr.label(default = "//wheels:bazel_wheel", executable = True, cfg = "exec"),
        "_allowlist_function_transition": attr.label(default = "@bazel_tools//tools/allowlists/function_transition_allowlist"),
    },
)
