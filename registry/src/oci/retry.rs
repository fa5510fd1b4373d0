//! Retries: which failures are worth another attempt, and the backoff between attempts.

use std::time::Duration;

use super::{OciClient, OciError};
use crate::progress::Progress;

impl OciError {
    /// Whether attempt number `attempt` (0 = the first retry) of a failed request is worth
    /// making: 5xx, 429 and transport errors always; a body that does not match its digest
    /// once (a proxy or connection that mangled it), never again after that (tampering).
    fn retryable(&self, attempt: u32) -> bool {
        match self {
            OciError::Transport { .. } => true,
            OciError::Status { code, .. } => *code >= 500 || *code == 429,
            OciError::Digest { .. } => attempt == 0,
            _ => false,
        }
    }
}

impl OciClient {
    /// Run `op` with retries and exponential backoff on retryable errors.
    pub(super) fn retry<T>(
        &self,
        progress: &dyn Progress,
        mut op: impl FnMut() -> Result<T, OciError>,
    ) -> Result<T, OciError> {
        let mut delay = self.opts.backoff;
        let mut attempt = 0;
        loop {
            match op() {
                Err(e) if e.retryable(attempt) && attempt < self.opts.retries => {
                    attempt += 1;
                    progress.note(&format!(
                        "{e}; retrying in {:.1}s ({attempt}/{})",
                        delay.as_secs_f64(),
                        self.opts.retries
                    ));
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(8));
                }
                other => return other,
            }
        }
    }
}
