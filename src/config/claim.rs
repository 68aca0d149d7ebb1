//! How the sweep claims rows: with `FOR UPDATE SKIP LOCKED` where the server has it,
//! or optimistically (`UPDATE ... WHERE id = ? AND status = 0`) on older servers.

use serde::{Deserialize, Serialize};

/// How rows are claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimMethod {
    /// `FOR UPDATE SKIP LOCKED` when the server has it, else optimistic.
    Auto,
    SkipLocked,
    Optimistic,
}

impl ClaimMethod {
    /// The method for a server reporting `version` (`SELECT VERSION()`).
    pub fn for_server(self, version: &str) -> ClaimMethod {
        if self != ClaimMethod::Auto {
            return self;
        }
        // MariaDB before 11 may prefix its version with "5.5.5-" for old clients.
        let version = version.strip_prefix("5.5.5-").unwrap_or(version);
        let mut numbers = version.split(|c: char| !c.is_ascii_digit()).map(|n| n.parse::<u32>().unwrap_or(0));
        let (major, minor, patch) =
            (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
        let has_skip_locked =
            if version.contains("MariaDB") { (major, minor) >= (10, 6) } else { (major, minor, patch) >= (8, 0, 1) };
        if has_skip_locked {
            ClaimMethod::SkipLocked
        } else {
            ClaimMethod::Optimistic
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ClaimMethod;

    #[test]
    fn skip_locked_from_mysql_8_0_1_and_mariadb_10_6() {
        let auto = |v: &str| ClaimMethod::Auto.for_server(v);
        assert_eq!(auto("10.11.6-MariaDB-0+deb12u1-log"), ClaimMethod::SkipLocked);
        assert_eq!(auto("10.6.0-MariaDB"), ClaimMethod::SkipLocked);
        assert_eq!(auto("10.5.22-MariaDB"), ClaimMethod::Optimistic);
        assert_eq!(auto("5.5.5-10.4.1-MariaDB"), ClaimMethod::Optimistic, "the 5.5.5- prefix is not the version");
        assert_eq!(auto("5.5.5-10.6.1-MariaDB"), ClaimMethod::SkipLocked);
        assert_eq!(auto("8.0.36"), ClaimMethod::SkipLocked);
        assert_eq!(auto("8.0.0-dmr"), ClaimMethod::Optimistic);
        assert_eq!(auto("5.7.44-log"), ClaimMethod::Optimistic);
        assert_eq!(ClaimMethod::Optimistic.for_server("8.4.0"), ClaimMethod::Optimistic, "configured wins");
    }
}
