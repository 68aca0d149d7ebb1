//! Warnings about settings are said once per process: a setting does not change
//! while the relay runs, and the same line on every reconnect or leader term only
//! buries what changed.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

/// Whether `warning` is said for the first time in this process (and remembers it).
pub(crate) fn first_time(warning: String) -> bool {
    static SAID: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    SAID.lock().unwrap_or_else(PoisonError::into_inner).insert(warning)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_warning_is_first_once() {
        let warning = format!("said-once test {}", std::process::id());
        assert!(super::first_time(warning.clone()));
        assert!(!super::first_time(warning));
    }
}
