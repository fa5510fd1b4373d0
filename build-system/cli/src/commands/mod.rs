//! One module per command: parse what clap left, call the library, render its report. No
//! command module imports another; what they share is in `opts` and `render`.

pub mod baseline;
pub mod build;
pub mod clean;
pub mod devices;
pub mod diff;
pub mod explain;
pub mod init;
pub mod inspect;
pub mod keygen;
pub mod ls;
pub mod package;
pub mod publish;
pub mod pull;
#[cfg(feature = "engine")]
pub mod run;
pub mod sign;
pub mod toolchain;

/// An error and its causes on one line, each cause once: a cause whose text the message
/// already holds (libraries often put their source in their own message) is not repeated.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !c.is_empty() && !out.contains(&c) {
            out.push_str(": ");
            out.push_str(&c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("not a JSON manifest: {0}")]
    struct Inner(#[from] std::fmt::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("m.json: {source}")]
    struct Outer {
        #[source]
        source: Inner,
    }

    #[test]
    fn each_cause_once() {
        let e = anyhow::Error::new(Outer {
            source: Inner(std::fmt::Error),
        });
        assert_eq!(
            error_text(&e),
            "m.json: not a JSON manifest: an error occurred when formatting an argument"
        );
        let e = anyhow::Error::new(std::fmt::Error).context("reading x");
        assert_eq!(
            error_text(&e),
            "reading x: an error occurred when formatting an argument"
        );
    }
}
