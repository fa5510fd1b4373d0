//! Where remote execution is configured: the command line, the environment (`KBUILD_REMOTE_*`,
//! as CI services pass secrets) and Kbuild.toml `[remote]`, in that order of precedence.

use std::time::Duration;

use kbuild_base::env::{names, Env};
use kbuild_build::config::RemoteSettings;

use crate::RemoteConfig;

/// Actions in flight at once by default: far more than a machine's cores, as a service runs
/// them on its workers; uploads and waits are cheap here.
const DEFAULT_IN_FLIGHT: usize = 200;
/// Executions watched over open streams at once (the rest poll).
const DEFAULT_STREAMS: usize = 16;
/// How long past its own timeout an action may take (queueing, a lost worker's lease).
const QUEUE_DEADLINE: Duration = Duration::from_secs(300);

/// The build command's remote execution options.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RemoteExecArgs {
    /// Run compile jobs on a Remote Execution API service: grpc://HOST:PORT or
    /// grpcs://HOST:PORT (also KBUILD_REMOTE_EXECUTION, Kbuild.toml [remote] execution).
    /// Headers for its calls come from KBUILD_REMOTE_HEADERS ("name=value" lines).
    #[arg(long, value_name = "URL", env = "KBUILD_REMOTE_EXECUTION")]
    pub remote_execution: Option<String>,
    /// The REAPI instance name (also KBUILD_REMOTE_INSTANCE, [remote] instance).
    #[arg(long, value_name = "NAME", env = "KBUILD_REMOTE_INSTANCE")]
    pub remote_instance: Option<String>,
    /// A platform property every action carries, KEY=VALUE, repeatable (added to [remote]
    /// platform): OSFamily, container-image, a pool name.
    #[arg(long = "remote-platform", value_name = "KEY=VALUE")]
    pub remote_platform: Vec<String>,
    /// Actions carry the compiler's installation as input directories (hashed and uploaded
    /// once) instead of needing a worker that has it; also [remote] hermetic.
    #[arg(long)]
    pub remote_hermetic: bool,
}

/// A malformed remote execution setting.
#[derive(Debug, thiserror::Error)]
pub enum RemoteExecOptionsError {
    #[error("--remote-platform `{0}`: expected KEY=VALUE")]
    Platform(String),
    #[error("KBUILD_REMOTE_HEADERS line `{0}`: expected name=value")]
    Header(String),
    #[error("the remote execution CA file {path}: {why}")]
    CaFile { path: String, why: String },
}

impl RemoteExecArgs {
    /// The configuration, when remote execution is asked for anywhere; `None` otherwise.
    pub fn config(
        &self,
        project: &RemoteSettings,
        env: &Env,
    ) -> Result<Option<RemoteConfig>, RemoteExecOptionsError> {
        let Some(endpoint) = self
            .remote_execution
            .clone()
            .or_else(|| project.execution.clone())
            .filter(|e| !e.is_empty())
        else {
            return Ok(None);
        };
        let mut platform: Vec<(String, String)> = project
            .platform
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for p in &self.remote_platform {
            let (k, v) = p
                .split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| RemoteExecOptionsError::Platform(p.clone()))?;
            platform.retain(|(key, _)| key != k);
            platform.push((k.to_string(), v.to_string()));
        }
        let mut headers = Vec::new();
        if let Some(text) = env.get(names::KBUILD_REMOTE_HEADERS) {
            for line in text
                .to_string_lossy()
                .lines()
                .filter(|l| !l.trim().is_empty())
            {
                let (k, v) = line
                    .split_once('=')
                    .filter(|(k, _)| !k.trim().is_empty())
                    .ok_or_else(|| RemoteExecOptionsError::Header(redact(line)))?;
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        let ca_pem = match env
            .path(names::KBUILD_REMOTE_CA_FILE)
            .or_else(|| project.ca_file.clone())
        {
            Some(path) => Some(read_ca(&path)?),
            None => None,
        };
        Ok(Some(RemoteConfig {
            ca_pem,
            endpoint,
            instance: self
                .remote_instance
                .clone()
                .or_else(|| project.instance.clone())
                .unwrap_or_default(),
            headers,
            platform,
            max_in_flight: project.jobs.unwrap_or(DEFAULT_IN_FLIGHT),
            max_streams: project.streams.unwrap_or(DEFAULT_STREAMS).max(1),
            queue_deadline: project
                .queue_timeout
                .map(Duration::from_secs)
                .unwrap_or(QUEUE_DEADLINE),
            hermetic: self.remote_hermetic || project.hermetic,
        }))
    }
}

/// A PEM file of CA certificates (capped: it is a few kilobytes).
fn read_ca(path: &std::path::Path) -> Result<Vec<u8>, RemoteExecOptionsError> {
    let err = |why: String| RemoteExecOptionsError::CaFile {
        path: path.display().to_string(),
        why,
    };
    let data = kbuild_base::read::read_capped(path, 1 << 20, "a CA file")
        .map_err(|e| err(e.to_string()))?;
    if !data
        .windows(27)
        .any(|w| w == b"-----BEGIN CERTIFICATE-----")
    {
        return Err(err("holds no PEM certificate".into()));
    }
    Ok(data)
}

/// A header line as an error may show it: the name only (values are secrets).
fn redact(line: &str) -> String {
    match line.split_once(':') {
        Some((name, _)) => format!("{name}:…"),
        None => format!("{}…", line.chars().take(12).collect::<String>()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_wins_and_platforms_merge() {
        let project = RemoteSettings {
            execution: Some("grpc://from-toml:1".into()),
            instance: Some("toml".into()),
            platform: [("OSFamily".to_string(), "linux".to_string())].into(),
            jobs: Some(7),
            streams: Some(0),
            hermetic: false,
            queue_timeout: None,
            ca_file: None,
        };
        let args = RemoteExecArgs {
            remote_execution: Some("grpcs://cli:443".into()),
            remote_instance: None,
            remote_platform: vec!["pool=gpu".into(), "OSFamily=Linux".into()],
            remote_hermetic: true,
        };
        let env = Env::empty().with(names::KBUILD_REMOTE_HEADERS, "x-api-key=abc\n\n");
        let c = args.config(&project, &env).unwrap().unwrap();
        assert_eq!(c.endpoint, "grpcs://cli:443");
        assert_eq!(c.instance, "toml");
        assert_eq!(c.max_in_flight, 7);
        assert_eq!(c.max_streams, 1, "at least one stream");
        assert!(c.hermetic);
        assert_eq!(
            c.platform,
            [
                ("pool".to_string(), "gpu".to_string()),
                ("OSFamily".to_string(), "Linux".to_string())
            ]
        );
        assert_eq!(c.headers, [("x-api-key".to_string(), "abc".to_string())]);
        let none = RemoteExecArgs::default()
            .config(&RemoteSettings::default(), &Env::empty())
            .unwrap();
        assert!(none.is_none());
        let bad = RemoteExecArgs {
            remote_platform: vec!["=x".into()],
            ..args
        };
        assert!(bad.config(&project, &env).is_err());
    }
}
