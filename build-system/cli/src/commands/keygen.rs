//! `kbuild keygen`: an ed25519 key pair, written by `kbuild_bundle::sign::write_key_pair`.

use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::dirs::Dirs;
use kbuild_base::env::Env;
use kbuild_bundle::sign::{default_key_dir, write_key_pair};

use crate::cli::KeygenArgs;

pub fn run(args: KeygenArgs, env: &Env) -> Result<ExitCode> {
    let dirs = Dirs::from_env(env)?;
    let dir = args.out.unwrap_or_else(|| default_key_dir(&dirs));
    let pair = write_key_pair(&dir, &args.name, args.force)?;
    outln!("secret key: {} (keep it private)", pair.secret.display());
    outln!("public key: {} (id {})", pair.public.display(), pair.key_id);
    outln!(
        "hint: trust it with `trusted-keys = [\"{}\"]` under [signatures] in {}",
        pair.public.display(),
        dirs.config_file.display()
    );
    Ok(ExitCode::SUCCESS)
}
