"""go_toolchain_module: a Go release fetched as the module golang.org/toolchain.

The Go module proxy serves every Go release as the module
`golang.org/toolchain` at version `v0.0.1-<release>.<goos>-<goarch>`: a zip of
the binary distribution (bin/go, pkg/tool, src) under the module's path
prefix, with its executable bits. Fetching it from the proxy that serves the
project's other Go modules means the SDK comes from the same place as they
do, and the zip's sha256 (wheels/toolchain.json) pins it.

The proxy is read from GOPROXY in Bazel's repository environment
(`--repo_env=GOPROXY=...`, which bazel/offline/bazel.sh passes), as gazelle's
go_deps reads it; unset, it is the go command's own default. The result is
a plain GOROOT that rules_go's `go_sdk.wrap` registers.
"""

# The go command's default when GOPROXY is unset (`go help environment`).
_GO_DEFAULT_PROXY = "https://proxy.golang.org"

def proxy_urls(repository_ctx, path):
    """The URLs of `path` (`<module>/@v/<file>`) on each HTTP proxy of GOPROXY.

    GOPROXY is a list separated by ',' or '|'; `direct` and `off` are not
    proxies and are skipped.
    """
    value = repository_ctx.os.environ.get("GOPROXY", "") or _GO_DEFAULT_PROXY
    proxies = [
        p.rstrip("/")
        for p in value.replace("|", ",").split(",")
        if p.startswith("https://") or p.startswith("http://")
    ]
    if not proxies:
        fail("GOPROXY=%r names no HTTP proxy to fetch %s from; pass --repo_env=GOPROXY=https://..." % (value, path))
    return [p + "/" + path for p in proxies]

def _go_toolchain_module_impl(repository_ctx):
    module_version = "v0.0.1-%s.%s-%s" % (repository_ctx.attr.release, repository_ctx.attr.goos, repository_ctx.attr.goarch)
    repository_ctx.report_progress("Fetching golang.org/toolchain@" + module_version)
    repository_ctx.download_and_extract(
        url = proxy_urls(repository_ctx, "golang.org/toolchain/@v/%s.zip" % module_version),
        sha256 = repository_ctx.attr.sha256,
        type = "zip",
        stripPrefix = "golang.org/toolchain@" + module_version,
    )
    if not repository_ctx.path("VERSION").exists:
        fail("golang.org/toolchain@%s has no VERSION file: not a Go distribution" % module_version)
    repository_ctx.file("BUILD.bazel", 'exports_files(["VERSION"])\n')

go_toolchain_module = repository_rule(
    implementation = _go_toolchain_module_impl,
    attrs = {
        "release": attr.string(mandatory = True, doc = "The Go release, e.g. go1.26.8."),
        "goos": attr.string(mandatory = True),
        "goarch": attr.string(mandatory = True),
        "sha256": attr.string(mandatory = True, doc = "sha256 of the module zip the proxy serves."),
    },
    environ = ["GOPROXY"],
)
