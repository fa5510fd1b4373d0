//! kbuild's directories, XDG style: the cache (compile cache, pulled bundles), the data dir
//! (managed toolchains) and the user config file.

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

impl Dirs {
    pub fn from_env(env: &Env) -> Dirs {
        let home = env
            .path(names::HOME)
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        let xdg = |var: &str, fallback: &str| env.path(var).unwrap_or_else(|| home.join(fallback));
        Dirs {
            cache: env
                .path(names::KBUILD_CACHE_DIR)
                .unwrap_or_else(|| xdg(names::XDG_CACHE_HOME, ".cache").join("kbuild")),
            data: env
                .path(names::KBUILD_DATA_DIR)
                .unwrap_or_else(|| xdg(names::XDG_DATA_HOME, ".local/share").join("kbuild")),
            config_file: env.path(names::KBUILD_CONFIG).unwrap_or_else(|| {
                xdg(names::XDG_CONFIG_HOME, ".config").join("kbuild/config.toml")
            }),
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
        let d = Dirs::from_env(&env);
        assert_eq!(d.cache, PathBuf::from("/h/.cache/kbuild"));
        assert_eq!(d.data, PathBuf::from("/h/.local/share/kbuild"));
        assert_eq!(
            d.config_file,
            PathBuf::from("/h/.config/kbuild/config.toml")
        );
        let env = env
            .with(names::XDG_CACHE_HOME, "/x")
            .with(names::KBUILD_DATA_DIR, "/d");
        let d = Dirs::from_env(&env);
        assert_eq!(d.cache, PathBuf::from("/x/kbuild"));
        assert_eq!(d.data, PathBuf::from("/d"));
        assert_eq!(d.registry_cache(), PathBuf::from("/x/kbuild/registry"));
    }
}
