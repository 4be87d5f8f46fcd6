"""Where SGLang's source comes from: the package index (PEP 691), downloads by sha256, the one archive reader,
a release not pinned yet, and read-only views of a source tree (a checkout, a wheel, an install)."""
