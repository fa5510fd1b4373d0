//! kbuild bundles and the stores they are published to: a local directory and OCI registries.
