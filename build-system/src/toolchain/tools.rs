//! Running the package managers (pip, apt) and tools an install needs, their own output
//! shown as they run or captured for a failure's message.

use std::process::{Command, ExitStatus, Stdio};

use kbuild_base::env::Env;

use super::{which, ToolchainError};

/// Where the package managers' (pip's, apt's) own output goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolOutput {
    /// Captured: shown only when the install fails ([`ToolchainError::tool_output`]).
    #[default]
    Captured,
    /// Shown as it runs (`kbuild -v toolchain install`).
    Shown,
}

/// Run a package manager or tool, its output shown or captured; the exit status and the
/// captured output (stdout, then stderr).
pub(super) fn run_tool(
    cmd: &mut Command,
    shown_as: &str,
    output: ToolOutput,
) -> Result<(ExitStatus, String), ToolchainError> {
    let run = match output {
        ToolOutput::Shown => cmd.status().map(|s| (s, String::new())),
        ToolOutput::Captured => cmd.stdin(Stdio::null()).output().map(|o| {
            let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&o.stderr));
            (o.status, text)
        }),
    };
    run.map_err(|err| ToolchainError::Run {
        cmd: shown_as.to_string(),
        err,
    })
}

pub(super) fn apt_install(
    packages: &[&str],
    env: &Env,
    output: ToolOutput,
) -> Result<(), ToolchainError> {
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0"))
        .unwrap_or(false);
    let mut prefix: Vec<String> = Vec::new();
    if !is_root {
        if which("sudo", env).is_none() {
            return Err(ToolchainError::Install(format!(
                "HIP needs Debian packages; run as root: apt-get install -y {}",
                packages.join(" ")
            )));
        }
        prefix.push("sudo".into());
    }
    // Everything apt printed, for the error when the install fails in the end.
    let printed = std::cell::RefCell::new(String::new());
    let run = |args: &[&str]| -> Result<(), ToolchainError> {
        let mut all: Vec<String> = prefix.clone();
        all.extend(args.iter().map(|s| s.to_string()));
        let (status, text) = run_tool(
            Command::new(&all[0])
                .args(&all[1..])
                .env("DEBIAN_FRONTEND", "noninteractive"),
            &all.join(" "),
            output,
        )?;
        printed.borrow_mut().push_str(&text);
        if status.success() {
            Ok(())
        } else {
            Err(ToolchainError::Tool {
                message: format!("`{}` failed ({status})", all.join(" ")),
                output: printed.borrow().clone(),
            })
        }
    };
    let mut install = vec!["apt-get", "install", "-y", "-qq", "--no-install-recommends"];
    install.extend_from_slice(packages);
    if run(&install).is_err() {
        run(&["apt-get", "update", "-qq"])?;
        run(&install)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_tool_output_comes_back_for_a_failure() {
        let (status, text) = run_tool(
            Command::new("/bin/sh")
                .args(["-c", "echo Reading database; echo E: broken >&2; exit 3"]),
            "sh",
            ToolOutput::Captured,
        )
        .expect("sh runs");
        assert_eq!(status.code(), Some(3));
        assert_eq!(text, "Reading database\nE: broken\n");
        let e = ToolchainError::Tool {
            message: "`apt-get install` failed (exit status: 3)".into(),
            output: text,
        };
        assert_eq!(e.to_string(), "`apt-get install` failed (exit status: 3)");
        assert_eq!(e.tool_output(), Some("Reading database\nE: broken\n"));
        let quiet = ToolchainError::Tool {
            message: "x".into(),
            output: " \n".into(),
        };
        assert_eq!(quiet.tool_output(), None);
        let e = run_tool(
            &mut Command::new("/nonexistent/tool"),
            "tool",
            ToolOutput::Captured,
        )
        .expect_err("no such program");
        assert!(e.to_string().starts_with("running tool: "), "{e}");
    }
}
