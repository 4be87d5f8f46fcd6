"""A patch series: patch files and DEP-3 headers, the engine that applies like git, anchors, their relocation,
classification of each patch against a set of files, and upstream detection."""
