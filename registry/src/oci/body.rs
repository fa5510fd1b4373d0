//! Response bodies: what an exchange carries, reading one within a bound, and the message
//! of a distribution error body.

use std::io::Read;

use serde::Deserialize;

use crate::progress::Progress;

/// What an exchange carries: a document (bounded, read whole within the timeout) or a
/// blob stream (each read within the timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Body {
    Document,
    Stream,
}

/// The `errors[].message` of a distribution error body, or a short excerpt.
pub(super) fn error_message(r: ureq::Response) -> String {
    let body = read_all(r, 64 << 10, None).unwrap_or_default();
    #[derive(Deserialize)]
    struct Errs {
        errors: Vec<Err>,
    }
    #[derive(Deserialize)]
    struct Err {
        code: Option<String>,
        message: Option<String>,
    }
    if let Ok(e) = serde_json::from_slice::<Errs>(&body) {
        return e
            .errors
            .iter()
            .map(|e| {
                format!(
                    "{}{}",
                    e.code
                        .as_deref()
                        .map(|c| format!("{c}: "))
                        .unwrap_or_default(),
                    e.message.as_deref().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
    }
    String::from_utf8_lossy(&body).chars().take(200).collect()
}

/// Read a response body, at most `limit` bytes (more is an error), reporting progress.
pub(super) fn read_all(
    resp: ureq::Response,
    limit: u64,
    progress: Option<&dyn Progress>,
) -> std::io::Result<Vec<u8>> {
    let mut r = resp.into_reader().take(limit.saturating_add(1));
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if let Some(p) = progress {
            p.advance(n as u64);
        }
        if out.len() as u64 > limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                format!("response is larger than the {limit} bytes expected"),
            ));
        }
    }
    Ok(out)
}
