//! What the terminal shows while libraries work: the build's progress (a bar on a TTY, plain
//! lines otherwise, one JSON object per line with `--json`) and transfer bars for registry
//! commands.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

use kbuild_base::env::{names, Env};
use kbuild_build::events::{Event, JobStatus, Observer};
use kbuild_registry::progress::Progress;

/// How much a command says while it works: `-q` (errors and warnings only), the default, or
/// `-v` (also every job and every compile as it starts). Set once by `main`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

static VERBOSITY: std::sync::OnceLock<Verbosity> = std::sync::OnceLock::new();
static FANCY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Set the process's verbosity (`-q` wins over `-v`) and whether stderr takes escape codes
/// (the first call wins).
pub fn init(quiet: bool, verbose: bool, env: &Env) {
    let _ = VERBOSITY.set(match (quiet, verbose) {
        (true, _) => Verbosity::Quiet,
        (_, true) => Verbosity::Verbose,
        _ => Verbosity::Normal,
    });
    let _ = FANCY.set(stderr_is_fancy(env));
}

pub fn verbosity() -> Verbosity {
    VERBOSITY.get().copied().unwrap_or(Verbosity::Normal)
}

/// Whether stderr may get escape codes: a terminal, TERM not `dumb`, NO_COLOR unset.
pub fn stderr_is_fancy(env: &Env) -> bool {
    std::io::stderr().is_terminal()
        && env.str(names::TERM) != Some("dumb")
        && env.get(names::NO_COLOR).is_none()
}

/// Where a build's events go.
pub enum BuildProgress {
    Json,
    Plain(Verbosity),
    Bar {
        bar: indicatif::ProgressBar,
        /// Labels of the jobs compiling now, in start order.
        running: Mutex<Vec<String>>,
        verbosity: Verbosity,
    },
}

impl BuildProgress {
    /// JSON lines with `--json`; a bar when stderr is a terminal outside CI, TERM is not
    /// `dumb` and NO_COLOR is unset (and not `-q`); plain lines otherwise.
    pub fn new(json: bool, env: &Env) -> BuildProgress {
        if json {
            return BuildProgress::Json;
        }
        let verbosity = verbosity();
        if verbosity > Verbosity::Quiet && stderr_is_fancy(env) && env.get(names::CI).is_none() {
            let bar = indicatif::ProgressBar::new(0);
            // Short fixed part; the message (how many run, and which) takes the rest of the
            // terminal's width and is cut to fit it.
            let style = indicatif::ProgressStyle::with_template(
                "{spinner} {pos}/{len} [{bar:20}] {elapsed} {wide_msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style.progress_chars("=> "));
            bar.enable_steady_tick(Duration::from_millis(200));
            return BuildProgress::Bar {
                bar,
                running: Mutex::new(Vec::new()),
                verbosity,
            };
        }
        BuildProgress::Plain(verbosity)
    }

    /// Plain lines at the default verbosity (for `--print-commands` notes).
    pub fn plain() -> BuildProgress {
        BuildProgress::Plain(verbosity())
    }
}

/// `2 running: a for sm_89, b for gfx1100`.
fn running_message(running: &[String]) -> String {
    if running.is_empty() {
        return String::new();
    }
    format!("{} running: {}", running.len(), running.join(", "))
}

impl Observer for BuildProgress {
    fn planned(&self, jobs: usize) {
        if let BuildProgress::Bar { bar, .. } = self {
            bar.set_length(jobs as u64);
        }
    }

    fn started(&self, label: &str) {
        match self {
            BuildProgress::Bar {
                bar,
                running,
                verbosity,
            } => {
                if *verbosity >= Verbosity::Verbose {
                    bar.println(format!("  starting {label}"));
                }
                if let Ok(mut r) = running.lock() {
                    r.push(label.to_string());
                    bar.set_message(running_message(&r));
                }
            }
            BuildProgress::Plain(Verbosity::Verbose) => eprintln!("  starting {label}"),
            _ => {}
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
            BuildProgress::Plain(v) => {
                let show = match e {
                    Event::Job { .. } | Event::Shard { .. } | Event::Unit { .. } => {
                        *v > Verbosity::Quiet
                    }
                    Event::Summary { failed, .. } => *v > Verbosity::Quiet || *failed > 0,
                };
                if show {
                    if let Some(line) = e.line() {
                        eprintln!("{line}");
                    }
                }
            }
            BuildProgress::Bar {
                bar,
                running,
                verbosity,
            } => match e {
                Event::Job { status, .. } => {
                    if let (Some(label), Ok(mut r)) = (e.job_label(), running.lock()) {
                        if let Some(i) = r.iter().position(|l| *l == label) {
                            r.remove(i);
                        }
                        bar.set_message(running_message(&r));
                    }
                    if *status == JobStatus::Failed || *verbosity >= Verbosity::Verbose {
                        if let Some(line) = e.line() {
                            bar.println(line);
                        }
                    }
                    bar.inc(1);
                }
                Event::Shard { .. } => {
                    if let Some(line) = e.line() {
                        bar.println(line);
                    }
                }
                Event::Unit { source, .. } => {
                    if *verbosity >= Verbosity::Verbose {
                        if let Some(line) = e.line() {
                            bar.println(line);
                        }
                    }
                    bar.set_message(source.clone());
                    bar.inc(1);
                }
                Event::Summary { .. } => {
                    bar.finish_and_clear();
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
            BuildProgress::Bar { bar, .. } => bar.println(text),
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
        let quiet = json || verbosity() == Verbosity::Quiet;
        Bars {
            show_bars: !quiet && FANCY.get().copied().unwrap_or(false),
            quiet,
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
