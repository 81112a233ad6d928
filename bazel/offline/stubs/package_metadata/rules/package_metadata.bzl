"""package_metadata(name, purl, attributes): writes {"purl": purl} as JSON."""

load("//providers:package_metadata_info.bzl", "PackageMetadataInfo")

def _package_metadata_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".package-metadata.json")
    ctx.actions.write(out, json.encode({"label": str(ctx.label), "purl": ctx.attr.purl}))
    return [
        DefaultInfo(files = depset([out])),
        PackageMetadataInfo(metadata = out, files = depset([out])),
    ]

_package_metadata = rule(
    implementation = _package_metadata_impl,
    attrs = {
        "purl": attr.string(mandatory = True),
        "attributes": attr.label_list(),
    },
)

def package_metadata(name, **kwargs):
    # Metadata targets carry no metadata themselves (else a package's default
    # metadata would apply to itself: a cycle).
    kwargs.setdefault("applicable_licenses", [])
    _package_metadata(name = name, **kwargs)
