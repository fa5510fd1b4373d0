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

/// Directories kbuild needs that no variable names (HOME and the XDG variable are unset or
/// not absolute paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirsError {
    /// Each directory without a variable: what it is for ("cache directory", "data
    /// directory", "config file"), kbuild's variable and the XDG variable for it.
    pub missing: Vec<Missing>,
}

/// One directory of a [`DirsError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub what: &'static str,
    pub own: &'static str,
    pub xdg: &'static str,
}

impl std::fmt::Display for DirsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |g: fn(&Missing) -> &'static str| {
            self.missing.iter().map(g).collect::<Vec<_>>().join(", ")
        };
        write!(
            f,
            "no {} for kbuild: HOME is unset (or not an absolute path), and so is {}; set HOME, \
             or {} (or {}). kbuild never falls back to a shared directory such as /tmp",
            list(|m| m.what),
            list(|m| m.xdg),
            list(|m| m.xdg),
            list(|m| m.own),
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
        let mut missing = Vec::new();
        let mut pick = |what: &'static str,
                        own: &'static str,
                        xdg: &'static str,
                        home_rel: &str,
                        leaf: &str|
         -> PathBuf {
            if let Some(p) = abs(own) {
                return p;
            }
            if let Some(p) = abs(xdg) {
                return p.join(leaf);
            }
            match &home {
                Some(h) => h.join(home_rel).join(leaf),
                None => {
                    missing.push(Missing { what, own, xdg });
                    PathBuf::new()
                }
            }
        };
        let dirs = Dirs {
            cache: pick(
                "cache directory",
                names::KBUILD_CACHE_DIR,
                names::XDG_CACHE_HOME,
                ".cache",
                "kbuild",
            ),
            data: pick(
                "data directory",
                names::KBUILD_DATA_DIR,
                names::XDG_DATA_HOME,
                ".local/share",
                "kbuild",
            ),
            config_file: pick(
                "config file",
                names::KBUILD_CONFIG,
                names::XDG_CONFIG_HOME,
                ".config",
                "kbuild/config.toml",
            ),
        };
        if missing.is_empty() {
            Ok(dirs)
        } else {
            Err(DirsError { missing })
        }
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
        assert_eq!(e.missing.len(), 3);
        let msg = e.to_string();
        assert_eq!(
            msg,
            "no cache directory, data directory, config file for kbuild: HOME is unset (or not \
             an absolute path), and so is XDG_CACHE_HOME, XDG_DATA_HOME, XDG_CONFIG_HOME; set \
             HOME, or XDG_CACHE_HOME, XDG_DATA_HOME, XDG_CONFIG_HOME (or KBUILD_CACHE_DIR, \
             KBUILD_DATA_DIR, KBUILD_CONFIG). kbuild never falls back to a shared directory \
             such as /tmp"
        );
        // A relative HOME is no HOME.
        let e = Dirs::from_env(&Env::empty().with(names::HOME, "rel")).unwrap_err();
        assert_eq!(e.missing.len(), 3);
        let env = Env::empty()
            .with(names::XDG_CACHE_HOME, "/c")
            .with(names::XDG_DATA_HOME, "/d");
        let e = Dirs::from_env(&env).unwrap_err();
        assert_eq!(e.missing.len(), 1);
        assert_eq!(e.missing[0].what, "config file");
        assert!(
            e.to_string()
                .starts_with("no config file for kbuild: HOME is unset"),
            "{e}"
        );
        let d = Dirs::from_env(&env.with(names::XDG_CONFIG_HOME, "/f")).unwrap();
        assert_eq!(d.cache, PathBuf::from("/c/kbuild"));
        assert_eq!(d.data, PathBuf::from("/d/kbuild"));
        assert_eq!(d.config_file, PathBuf::from("/f/kbuild/config.toml"));
    }
}
