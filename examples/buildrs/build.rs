//! Build the crate's kernels for two targets and embed them (see kbuild's `buildrs` module).

fn main() {
    if let Err(e) = kbuild_build::Build::from_manifest("kernels/Kbuild.toml")
        .targets(["sm_89", "gfx1100"])
        .run()
    {
        // One readable error instead of a Debug dump; cargo shows it and fails the build.
        eprintln!("error: building the kernels: {e}");
        std::process::exit(1);
    }
}
