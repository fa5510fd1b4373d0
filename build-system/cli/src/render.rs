//! Rendering shared by the commands: stdout itself ([`out!`], [`outln!`]), JSON documents as
//! one line, and colour.
//!
//! Every command writes stdout through [`write_stdout`], never `print!`/`println!` (which
//! panic when the reader has gone: `kbuild inspect … | head -1`); a unit test keeps it so.

use std::io::Write;

use kbuild_base::env::{names, Env};
use serde::Serialize;

/// `print!` for the commands: through [`write_stdout`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::render::write_stdout(&format!($($arg)*))
    };
}

/// `println!` for the commands: through [`write_stdout`].
macro_rules! outln {
    () => {
        $crate::render::write_stdout("\n")
    };
    ($($arg:tt)*) => {
        $crate::render::write_stdout(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// The exit status of a command whose reader closed stdout: what a shell reports for a
/// process that SIGPIPE ended (128 + 13), as `cat` gives in the same place.
pub const CLOSED_STDOUT_EXIT: i32 = 141;

/// Write `text` to stdout and flush. A closed pipe ends the process at once, quietly, with
/// [`CLOSED_STDOUT_EXIT`]: nobody reads what follows. Another write error is said on stderr
/// and ends it with 1 (the report did not get out).
pub fn write_stdout(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::exit(CLOSED_STDOUT_EXIT)
        }
        Err(e) => {
            eprintln!("error: writing to stdout: {e}");
            std::process::exit(1)
        }
    }
}

/// `doc` (a library's document type) on stdout as one compact JSON line, keys sorted as
/// kbuild's JSON lines have always been (serde_json's map order).
pub fn print_json_line<T: Serialize>(doc: &T) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_value(doc)?);
    Ok(())
}

/// Colour when writing to a terminal and NO_COLOR is unset or empty.
pub fn color(is_terminal: bool, env: &Env) -> bool {
    is_terminal && env.get(names::NO_COLOR).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No command prints with `print!`/`println!` (they panic on a closed pipe).
    #[test]
    fn commands_write_stdout_through_the_helper() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = vec![src.join("main.rs"), src.join("render.rs")];
        for dir in [src.clone(), src.join("commands")] {
            for e in std::fs::read_dir(dir).expect("src") {
                files.push(e.expect("entry").path());
            }
        }
        let mut found = Vec::new();
        for f in files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        {
            let text = std::fs::read_to_string(f).expect("source");
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for bad in ["println!(", "print!("] {
                    if code
                        .match_indices(bad)
                        .any(|(at, _)| !code[..at].ends_with('e') && !code[..at].ends_with("\""))
                    {
                        found.push(format!("{}:{}: {line}", f.display(), i + 1));
                    }
                }
            }
        }
        assert!(found.is_empty(), "use out!/outln!:\n{}", found.join("\n"));
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let env = Env::empty();
        assert!(!color(false, &env));
        assert!(color(true, &env));
        assert!(!color(true, &env.with(names::NO_COLOR, "1")));
    }
}
