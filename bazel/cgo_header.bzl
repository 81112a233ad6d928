"""cgo_header: the cgo-generated header of a c-archive go_binary, for C code.

rules_go provides `<name>.h` through the go_binary's CcInfo, but in the Go
configuration's output tree and under an include path that doesn't reach it
by its bare name. This rule puts it at `<package>/<out_dir>/<header>`, so a
cc_library with `includes = ["<out_dir>"]` makes `#include "<header>"` work.
"""

load("@rules_cc//cc/common:cc_info.bzl", "CcInfo")

def _cgo_header_impl(ctx):
    wanted = ctx.attr.header or (ctx.attr.archive.label.name + ".h")
    found = [h for h in ctx.attr.archive[CcInfo].compilation_context.headers.to_list() if h.basename == wanted]
    if not found:
        fail("%s provides no header %s" % (ctx.attr.archive.label, wanted))
    out = ctx.actions.declare_file(ctx.attr.out_dir + "/" + wanted)
    ctx.actions.symlink(output = out, target_file = found[0])
    return [DefaultInfo(files = depset([out]))]

cgo_header = rule(
    implementation = _cgo_header_impl,
    attrs = {
        "archive": attr.label(mandatory = True, providers = [CcInfo]),
        "header": attr.string(doc = "Defaults to <archive name>.h"),
        "out_dir": attr.string(default = "include"),
    },
)
