"""The `buildozer_binary` extension Bazel's tools module uses: a repository
@buildozer_binary whose `buildozer.exe` (the name on every platform, as the
real module has it) `bazel mod tidy` runs. Here it links to the binary that
prepare_modules.sh built into this module's folder, instead of downloading a
release."""

def _buildozer_binary_repo_impl(rctx):
    rctx.symlink(rctx.path(Label("//:buildozer")), "buildozer.exe")
    rctx.file("BUILD.bazel", 'exports_files(["buildozer.exe"])\n')

_buildozer_binary_repo = repository_rule(implementation = _buildozer_binary_repo_impl)

def _buildozer_binary_impl(_mctx):
    _buildozer_binary_repo(name = "buildozer_binary")

buildozer_binary = module_extension(implementation = _buildozer_binary_impl)
