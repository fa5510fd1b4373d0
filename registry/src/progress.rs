//! Transfer progress, reported through a trait so this library prints nothing: the CLI draws
//! bars (indicatif), a program embedding kbuild does what it likes.

/// Receives progress of transfers and one-line notes. Every method has a no-op default.
pub trait Progress: Sync {
    /// A transfer of `total` bytes named `label` starts.
    fn begin(&self, _label: &str, _total: u64) {}
    /// `bytes` more were moved.
    fn advance(&self, _bytes: u64) {}
    /// The current transfer ended (done or failed).
    fn end(&self) {}
    /// Something the user may want to know ("blob exists, skipped", "retrying in 1s").
    fn note(&self, _text: &str) {}
}

/// Reports nothing.
pub struct Silent;

impl Progress for Silent {}
