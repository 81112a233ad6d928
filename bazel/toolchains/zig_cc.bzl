"""cc toolchains that compile and link with `zig cc -target <triple>`.

One toolchain per target platform, all running on an x86_64 Linux build
machine (the machine the ziglang wheel of wheels/requirements-build.txt runs
on). Generated into the zig repository by zig.bzl; see
bazel/toolchains/extensions.bzl for the platforms.
"""

load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "ACTION_NAMES")
load(
    "@bazel_tools//tools/cpp:cc_toolchain_config_lib.bzl",
    "feature",
    "flag_group",
    "flag_set",
    "tool_path",
)
load("@rules_cc//cc:defs.bzl", "cc_toolchain")

_COMPILE_ACTIONS = [
    ACTION_NAMES.c_compile,
    ACTION_NAMES.cpp_compile,
    ACTION_NAMES.assemble,
    ACTION_NAMES.preprocess_assemble,
]

def _zig_cc_config_impl(ctx):
    cc = "bin/cc-" + ctx.attr.target_name
    features = [
        feature(name = "supports_pic", enabled = True),
        feature(name = "supports_dynamic_linker", enabled = True),
        # wheels/build.py's flags: optimised, no debug info, so that the
        # objects don't depend on where they were built.
        feature(
            name = "pgn_release_flags",
            enabled = True,
            flag_sets = [flag_set(
                actions = _COMPILE_ACTIONS,
                flag_groups = [flag_group(flags = ["-O2", "-g0", "-Wno-builtin-macro-redefined"])],
            )],
        ),
    ]
    return cc_common.create_cc_toolchain_config_info(
        ctx = ctx,
        toolchain_identifier = "zig-" + ctx.attr.target_name,
        host_system_name = "x86_64-linux",
        target_system_name = ctx.attr.triple,
        target_cpu = ctx.attr.target_name,
        target_libc = "unknown",
        compiler = "zig",
        abi_version = "unknown",
        abi_libc_version = "unknown",
        features = features,
        tool_paths = [
            tool_path(name = "gcc", path = cc),
            tool_path(name = "cpp", path = cc),
            tool_path(name = "ld", path = cc),
            tool_path(name = "ar", path = "bin/ar"),
            # Not used by this build; zig has no gcov, and stripping is done
            # by the linker (-s).
            tool_path(name = "nm", path = "/bin/false"),
            tool_path(name = "objdump", path = "/bin/false"),
            tool_path(name = "strip", path = "/bin/false"),
            tool_path(name = "gcov", path = "/bin/false"),
        ],
    )

zig_cc_config = rule(
    implementation = _zig_cc_config_impl,
    attrs = {
        "target_name": attr.string(mandatory = True),
        "triple": attr.string(mandatory = True),
    },
    provides = [CcToolchainConfigInfo],
)

# Target platform name -> the constraints it is compatible with.
PLATFORM_CONSTRAINTS = {
    "linux_x86_64": ["@platforms//os:linux", "@platforms//cpu:x86_64"],
    "linux_aarch64": ["@platforms//os:linux", "@platforms//cpu:aarch64"],
    "macos_x86_64": ["@platforms//os:macos", "@platforms//cpu:x86_64"],
    "macos_arm64": ["@platforms//os:macos", "@platforms//cpu:aarch64"],
}

def zig_cc_toolchains(targets):
    """Declares, for each `name: triple` of `targets`, a cc toolchain `name`."""
    for name, triple in targets.items():
        zig_cc_config(
            name = name + "_config",
            target_name = name,
            triple = triple,
        )
        cc_toolchain(
            name = name + "_cc",
            all_files = ":all_files",
            ar_files = ":all_files",
            as_files = ":all_files",
            compiler_files = ":all_files",
            dwp_files = ":empty",
            linker_files = ":all_files",
            objcopy_files = ":empty",
            strip_files = ":empty",
            supports_param_files = 0,
            toolchain_config = name + "_config",
        )
        native.toolchain(
            name = name,
            exec_compatible_with = ["@platforms//os:linux", "@platforms//cpu:x86_64"],
            target_compatible_with = PLATFORM_CONSTRAINTS[name],
            toolchain = name + "_cc",
            toolchain_type = "@bazel_tools//tools/cpp:toolchain_type",
        )
