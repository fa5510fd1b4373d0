//! kbuild's directories, XDG style: the cache (compile cache, pulled bundles), the data dir
//! (managed toolchains) and the user config file.
//!
//! Each comes from kbuild's own variable, else the XDG variable, else `$HOME`. With none of
//! them set there is no directory: [`Dirs::from_env`] fails and names what to set. There is
//! never a shared fallback such as `/tmp`, where another user could plant a config file
//! (`policy = "off"`, trusted keys) or cache entries.

use std::path::PathBuf;

use crate::env::{names, Env};

/// Where kbuild keeps its files for one environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirs {
    /// `KBUILD_CACHE_DIR`, else `$XDG_CACHE_HOME/kbuild`, else `~/.cache/kbuild`.
    pub cache: PathBuf,
    /// `KBUILD_DATA_DIR`, else `$XDG_DATA_HOME/kbuild`, else `~/.local/share/kbuild`.
    pub data: PathBuf,
    /// `KBUILD_CONFIG`, else `$XDG_CONFIG_HOME/kbuild/config.toml`, else
    /// `~/.config/kbuild/config.toml`.
    pub config_file: PathBuf,
}

/// A directory kbuild needs that no variable names (HOME and the XDG variable are unset or
/// not absolute paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirsError {
    /// What the directory is for ("cache directory", "data directory", "config file").
    pub what: &'static str,
    /// The variables that would name it, in the order they are read.
    pub vars: [&'static str; 3],
}

impl std::fmt::Display for DirsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [own, xdg, home] = self.vars;
        write!(
            f,
            "no {} for kbuild: {own}, {xdg} and {home} are all unset (or not absolute paths); \
             set {home}, or {xdg} (or {own}). kbuild does not fall back to a shared directory such as /tmp",
            self.what
        )
    }
}

impl std::error::Error for DirsError {}

impl Dirs {
    /// The directories of `env`; an error when one of them has no variable to come from.
    pub fn from_env(env: &Env) -> Result<Dirs, DirsError> {
        // Only absolute paths: a relative one would depend on the current directory.
        let abs = |var: &str| env.path(var).filter(|p| p.is_absolute());
        let home = abs(names::HOME);
        let pick = |what: &'static str,
                    own: &'static str,
                    xdg: &'static str,
                    home_rel: &str,
                    leaf: &str|
         -> Result<PathBuf, DirsError> {
            if let Some(p) = abs(own) {
                return Ok(p);
            }
            if let Some(p) = abs(xdg) {
                return Ok(p.join(leaf));
            }
            match &home {
                Some(h) => Ok(h.join(home_rel).join(leaf)),
                None => Err(DirsError {
                    what,
                    vars: [own, xdg, names::HOME],
                }),
            }
        };
        Ok(Dirs {
            cache: pick(
                "cache directory",
                names::KBUILD_CACHE_DIR,
                names::XDG_CACHE_HOME,
                ".cache",
                "kbuild",
            )?,
            data: pick(
                "data directory",
                names::KBUILD_DATA_DIR,
                names::XDG_DATA_HOME,
                ".local/share",
                "kbuild",
            )?,
            config_file: pick(
                "config file",
                names::KBUILD_CONFIG,
                names::XDG_CONFIG_HOME,
                ".config",
                "kbuild/config.toml",
            )?,
        })
    }

    /// The pull cache of registry bundles: `<cache>/registry`.
    pub fn registry_cache(&self) -> PathBuf {
        self.cache.join("registry")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_then_xdg_then_home() {
        let env = Env::empty().with(names::HOME, "/h");
        let d = Dirs::from_env(&env).unwrap();
        assert_eq!(d.cache, PathBuf::from("/h/.cache/kbuild"));
        assert_eq!(d.data, PathBuf::from("/h/.local/share/kbuild"));
        assert_eq!(
            d.config_file,
            PathBuf::from("/h/.config/kbuild/config.toml")
        );
        let env = env
            .with(names::XDG_CACHE_HOME, "/x")
            .with(names::KBUILD_DATA_DIR, "/d");
        let d = Dirs::from_env(&env).unwrap();
        assert_eq!(d.cache, PathBuf::from("/x/kbuild"));
        assert_eq!(d.data, PathBuf::from("/d"));
        assert_eq!(d.registry_cache(), PathBuf::from("/x/kbuild/registry"));
    }

    #[test]
    fn without_home_xdg_or_nothing_never_tmp() {
        let e = Dirs::from_env(&Env::empty()).unwrap_err();
        assert_eq!(e.what, "cache directory");
        let msg = e.to_string();
        assert!(
            msg.contains("set HOME, or XDG_CACHE_HOME (or KBUILD_CACHE_DIR)"),
            "{msg}"
        );
        // A relative HOME is no HOME.
        let e = Dirs::from_env(&Env::empty().with(names::HOME, "rel")).unwrap_err();
        assert_eq!(e.what, "cache directory");
        let env = Env::empty()
            .with(names::XDG_CACHE_HOME, "/c")
            .with(names::XDG_DATA_HOME, "/d");
        let e = Dirs::from_env(&env).unwrap_err();
        assert_eq!(e.what, "config file");
        assert!(e.to_string().contains("XDG_CONFIG_HOME"), "{e}");
        let d = Dirs::from_env(&env.with(names::XDG_CONFIG_HOME, "/f")).unwrap();
        assert_eq!(d.cache, PathBuf::from("/c/kbuild"));
        assert_eq!(d.data, PathBuf::from("/d/kbuild"));
        assert_eq!(d.config_file, PathBuf::from("/f/kbuild/config.toml"));
    }
}
