//! What the terminal shows while libraries work: the build's progress (a bar on a TTY, plain
//! lines otherwise, one JSON object per line with `--json`) and transfer bars for registry
//! commands.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

use kbuild_base::env::{names, Env};
use kbuild_build::events::{Event, JobStatus, Observer};
use kbuild_registry::progress::Progress;

/// Where a build's events go.
pub enum BuildProgress {
    Json,
    Plain,
    Bar(indicatif::ProgressBar),
}

impl BuildProgress {
    /// JSON lines with `--json`; a bar when stderr is a terminal outside CI and TERM is not
    /// `dumb`; plain lines otherwise.
    pub fn new(json: bool, env: &Env) -> BuildProgress {
        if json {
            return BuildProgress::Json;
        }
        let dumb = env.str(names::TERM) == Some("dumb");
        if std::io::stderr().is_terminal() && env.get(names::CI).is_none() && !dumb {
            let bar = indicatif::ProgressBar::new(0);
            let style = indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} ETA {eta} {wide_msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(200));
            return BuildProgress::Bar(bar);
        }
        BuildProgress::Plain
    }
}

impl Observer for BuildProgress {
    fn planned(&self, jobs: usize) {
        if let BuildProgress::Bar(b) = self {
            b.set_length(jobs as u64);
        }
    }

    fn started(&self, label: &str) {
        if let BuildProgress::Bar(b) = self {
            b.set_message(format!("compiling {label}"));
        }
    }

    fn event(&self, e: &Event) {
        match self {
            BuildProgress::Json => {
                if let Ok(line) = serde_json::to_string(e) {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{line}");
                }
            }
            BuildProgress::Plain => {
                if let Some(line) = e.line() {
                    eprintln!("{line}");
                }
            }
            BuildProgress::Bar(b) => match e {
                Event::Job {
                    status: JobStatus::Failed,
                    ..
                } => {
                    if let Some(line) = e.line() {
                        b.println(line);
                    }
                    b.inc(1);
                }
                Event::Job { .. } => b.inc(1),
                Event::Summary { .. } => {
                    b.finish_and_clear();
                    if let Some(line) = e.line() {
                        eprintln!("{line}");
                    }
                }
            },
        }
    }

    /// Free text goes to stderr in every mode, so stdout stays one JSON object per line.
    fn note(&self, text: &str) {
        match self {
            BuildProgress::Bar(b) => b.println(text),
            _ => eprintln!("{text}"),
        }
    }
}

/// Transfer bars on stderr (hidden when it is not a terminal or output is JSON); notes as
/// plain lines.
pub struct Bars {
    show_bars: bool,
    quiet: bool,
    bar: Mutex<Option<indicatif::ProgressBar>>,
}

impl Bars {
    pub fn new(json: bool) -> Bars {
        Bars {
            show_bars: !json && std::io::stderr().is_terminal(),
            quiet: json,
            bar: Mutex::new(None),
        }
    }
}

impl Progress for Bars {
    fn begin(&self, label: &str, total: u64) {
        if !self.show_bars {
            return;
        }
        let bar = indicatif::ProgressBar::new(total);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg:>16} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(label.to_string());
        if let Ok(mut b) = self.bar.lock() {
            *b = Some(bar);
        }
    }
    fn advance(&self, bytes: u64) {
        if let Ok(b) = self.bar.lock() {
            if let Some(b) = b.as_ref() {
                b.inc(bytes);
            }
        }
    }
    fn end(&self) {
        if let Ok(mut b) = self.bar.lock() {
            if let Some(b) = b.take() {
                b.finish_and_clear();
            }
        }
    }
    fn note(&self, text: &str) {
        if !self.quiet {
            eprintln!("note: {text}");
        }
    }
}
