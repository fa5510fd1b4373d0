//! Build events and the three ways of reporting them: a progress bar on a TTY, plain lines
//! otherwise, and `--json` (one JSON object per line).

use std::io::{IsTerminal, Write};
use std::time::Duration;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Compiled,
    Cached,
    Failed,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum Event {
    Job {
        kernel: String,
        variant: Option<String>,
        target: String,
        status: JobStatus,
        seconds: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    Summary {
        compiled: usize,
        cached: usize,
        failed: usize,
        seconds: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        manifest: Option<String>,
        /// Hits, uploads, refused entries and why the remote was switched off, if it was.
        #[serde(skip_serializing_if = "Option::is_none")]
        remote_cache: Option<crate::remote_cache::RemoteStats>,
    },
}

/// Where events go.
pub enum Reporter {
    Json,
    Plain,
    Bar(indicatif::ProgressBar),
}

impl Reporter {
    pub fn new(json: bool, total: usize) -> Reporter {
        if json {
            return Reporter::Json;
        }
        if std::io::stderr().is_terminal() && std::env::var_os("CI").is_none() {
            let bar = indicatif::ProgressBar::new(total as u64);
            let style = indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} ETA {eta} {wide_msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(200));
            return Reporter::Bar(bar);
        }
        Reporter::Plain
    }

    /// A job started (bar shows current jobs).
    pub fn started(&self, label: &str) {
        if let Reporter::Bar(b) = self {
            b.set_message(format!("compiling {label}"));
        }
    }

    pub fn event(&self, e: &Event) {
        match self {
            Reporter::Json => {
                if let Ok(line) = serde_json::to_string(e) {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{line}");
                }
            }
            Reporter::Plain => {
                if let Some(line) = plain_line(e) {
                    eprintln!("{line}");
                }
            }
            Reporter::Bar(b) => match e {
                Event::Job {
                    status: JobStatus::Failed,
                    ..
                } => {
                    if let Some(line) = plain_line(e) {
                        b.println(line);
                    }
                    b.inc(1);
                }
                Event::Job { .. } => b.inc(1),
                Event::Summary { .. } => {
                    b.finish_and_clear();
                    if let Some(line) = plain_line(e) {
                        eprintln!("{line}");
                    }
                }
            },
        }
    }

    /// Free text for humans (failure details); goes to stderr except in JSON mode, where it
    /// still goes to stderr so stdout stays one JSON object per line.
    pub fn note(&self, text: &str) {
        match self {
            Reporter::Bar(b) => b.println(text),
            _ => eprintln!("{text}"),
        }
    }
}

fn plain_line(e: &Event) -> Option<String> {
    match e {
        Event::Job {
            kernel,
            variant,
            target,
            status,
            seconds,
            error,
            ..
        } => {
            let name = match variant {
                Some(v) => format!("{kernel}.{v}"),
                None => kernel.clone(),
            };
            Some(match status {
                JobStatus::Compiled => format!("  compiled {name} for {target} ({seconds:.2} s)"),
                JobStatus::Cached => format!("    cached {name} for {target}"),
                JobStatus::Failed => format!(
                    "    FAILED {name} for {target}: {}",
                    error.as_deref().unwrap_or("failed")
                ),
            })
        }
        Event::Summary {
            compiled,
            cached,
            failed,
            seconds,
            manifest,
            remote_cache,
        } => {
            Some(format!(
            "kbuild: {compiled} compiled, {cached} cached, {failed} failed in {seconds:.2} s{}{}",
            manifest
                .as_ref()
                .map(|m| format!("; manifest {m}"))
                .unwrap_or_default(),
            remote_cache
                .as_ref()
                .map(|r| format!(
                    "; remote cache: {} fetched, {} uploaded{}{}",
                    r.hits,
                    r.uploads,
                    if r.refused > 0 { format!(", {} refused", r.refused) } else { String::new() },
                    if r.unavailable.is_some() { " (unavailable)" } else { "" }
                ))
                .unwrap_or_default()
        ))
        }
    }
}
