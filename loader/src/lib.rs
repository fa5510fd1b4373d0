//! Run-time side of kbuild: detects the GPU, selects the code object that runs on it, verifies and loads it.
