"""Offline pip extension: pip.parse answered by the system interpreter's pip.

Takes the parse tag of current rules_python releases (hub_name,
python_version, requirements_lock, ...). For each hub it downloads the wheels
of the lock file from the package index pip is configured with (no deps
resolution: the lock lists everything), unpacks them and writes, like
rules_python's hub, a package per distribution (`@hub//grpcio`, normalized
names) and requirements.bzl with requirement().
"""

def _hub_impl(rctx):
    python = rctx.which("python3")
    if not python:
        fail("offline pip: no python3 on PATH")
    script = rctx.path(Label("//python/private/pgn_offline:pip_hub.py"))
    lock = rctx.path(rctx.attr.requirements_lock)
    rctx.report_progress("pip download of " + str(rctx.attr.requirements_lock))
    res = rctx.execute(
        [python, script, str(lock), "."] + rctx.attr.extra_pip_args,
        timeout = rctx.attr.timeout,
        quiet = False,
    )
    if res.return_code != 0:
        fail("offline pip hub %s failed:\n%s\n%s" % (rctx.name, res.stdout, res.stderr))

_hub = repository_rule(
    implementation = _hub_impl,
    attrs = {
        "extra_pip_args": attr.string_list(),
        "requirements_lock": attr.label(allow_single_file = True),
        "timeout": attr.int(default = 600),
    },
    environ = ["PATH", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CERT", "SSL_CERT_FILE"],
)

def _pip_impl(module_ctx):
    for mod in module_ctx.modules:
        for tag in mod.tags.parse:
            lock = tag.requirements_lock or tag.requirements_linux
            if not lock:
                fail("offline pip.parse: requirements_lock is required")
            _hub(
                name = tag.hub_name,
                requirements_lock = lock,
                extra_pip_args = tag.extra_pip_args,
                timeout = tag.timeout,
            )

pip = module_extension(
    implementation = _pip_impl,
    tag_classes = {
        "parse": tag_class(attrs = {
            "download_only": attr.bool(),
            "experimental_index_url": attr.string(),
            "extra_pip_args": attr.string_list(),
            "hub_name": attr.string(mandatory = True),
            "python_version": attr.string(),
            "requirements_lock": attr.label(),
            "requirements_linux": attr.label(),
            "timeout": attr.int(default = 600),
        }),
    },
)
