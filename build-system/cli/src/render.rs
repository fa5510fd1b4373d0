//! Rendering shared by the commands: JSON documents as one line, and colour.

use kbuild_base::env::{names, Env};
use serde::Serialize;

/// `doc` (a library's document type) on stdout as one compact JSON line, keys sorted as
/// kbuild's JSON lines have always been (serde_json's map order).
pub fn print_json_line<T: Serialize>(doc: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_value(doc)?);
    Ok(())
}

/// Colour when writing to a terminal and NO_COLOR is unset or empty.
pub fn color(is_terminal: bool, env: &Env) -> bool {
    is_terminal && env.get(names::NO_COLOR).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let env = Env::empty();
        assert!(!color(false, &env));
        assert!(color(true, &env));
        assert!(!color(true, &env.with(names::NO_COLOR, "1")));
    }
}
