"""PackageMetadataInfo, as in the package_metadata module."""

PackageMetadataInfo = provider(
    doc = "Metadata of a package: its purl and a JSON file describing it.",
    fields = {
        "metadata": "File: JSON with at least {\"purl\": ...}",
        "files": "depset of files the metadata refers to",
    },
)
